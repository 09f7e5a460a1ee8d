"""The paper's experiments as command-line programs (``python -m ddesys.experiments.<name> --help``).

They need the ``experiments`` extra (PyTorch, scikit-learn, Hugging Face transformers):
``pip install 'ddesys[experiments]'``. Without torch, importing this package raises an ImportError that
says so; a program that needs scikit-learn or transformers for what it was asked names the extra too.
"""

if __name__ != "ddesys.experiments":  # the clone's folder imported as a top-level package
    raise ImportError("this folder is the package ddesys.experiments: import it as `import ddesys.experiments` "
                      "(importing `experiments` from the clone's root loads a second copy under another name)")

from ddesys.io import extra_message, missing_modules

if missing_modules("torch"):
    raise ImportError(extra_message("ddesys.experiments", "experiments", ["torch"]), name="torch")
del extra_message, missing_modules
