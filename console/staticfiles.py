"""Static files under hashed names, so browsers keep them for a year (whitenoise marks a hashed name immutable)."""

from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage


class HashedStaticFilesStorage(CompressedManifestStaticFilesStorage):
    """`collectstatic` writes each file under a name with its content's hash (and gzip/brotli copies); pages
    link those names with DEBUG on too, so `make run` pages load as production's do (Django's storage links
    the plain names under DEBUG, which whitenoise serves with `max-age=0`). A name the manifest lacks (no
    `collectstatic` yet, as in unit tests) is linked plainly rather than failing the page; the plain copies
    stay in STATIC_ROOT. After editing a static file, `collectstatic` (`make setup`) and a restart show it."""

    def url(self, name: str | None, force: bool = False) -> str:
        try:
            return super().url(name, force=True)
        except ValueError:
            return StaticFilesStorage.url(self, name)
