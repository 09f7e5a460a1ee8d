"""The version of ``ddesys``, in one place: ``ddesys.__version__`` and the wheel's metadata read it
(``pyproject.toml``: ``[tool.setuptools.dynamic]``, read statically, so a build imports nothing)."""

__version__ = "0.1.0"
