"""Test doubles for services outside the process: stand-ins the code under test reaches over the network."""
