import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Every persona hashes a password; the production hasher takes about a second each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
