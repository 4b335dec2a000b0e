"""The package's version (setup.cfg's), which `hvd-w2v --version` prints and every run.json records."""
__version__ = "0.1.0"
