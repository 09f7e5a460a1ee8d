

if __name__ != "ddesys.experiments":             # the old top-level name `experiments`: the same modules, with a warning
    import sys as _sys

    from ddesys._legacy import alias as _alias
    _sys.modules[__name__] = _alias(__name__)
