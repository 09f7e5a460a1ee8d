"""Sphinx configuration of the ddesys documentation.

Build (from the repository root)::

    pip install -e ".[docs]" && python -m sphinx -W -b html docs docs/_build/html

Markdown pages are read by MyST, docstrings by numpydoc, and ``examples/plot_*.py`` run through
sphinx-gallery. The build writes the gallery pages to ``docs/auto_examples`` and the API stubs to
``docs/api/generated``, both regenerated on every build.
"""
from __future__ import annotations

import pathlib
import re

import ddesys

HERE = pathlib.Path(__file__).resolve().parent

project = "ddesys"
author = "the ddesys authors"
copyright = "the ddesys authors"  # noqa: A001 - Sphinx's name
release = ddesys.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
try:                                   # optional: a copy button on code blocks
    import sphinx_copybutton  # noqa: F401
except ImportError:
    pass
else:
    extensions.append("sphinx_copybutton")

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "**/.ipynb_checkpoints",
    # the gallery's own sources and outputs that are not pages
    "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip",
    # machine-written comparison files, not documentation
    "verification/diff-*.md", "verification/refactor-diff.md",
]

# -- MyST (the Markdown pages: guides, theory, experiment notes) ---------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4

# -- autodoc, autosummary, numpydoc (the API reference) -------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"            # numpydoc's Parameters sections state the types
numpydoc_show_class_members = False   # the class template lists members itself
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()
numpydoc_xref_param_type = False

# Docstrings cross-reference modules by short names (``:mod:`train``` inside ddesys.experiments.general);
# where several packages have a module of that name Sphinx reports the ambiguity and picks one.
suppress_warnings = ["ref.python"]

# A few module docstrings write absolute values as ``|y|``, which reStructuredText reads as a
# substitution: define those as themselves.
rst_prolog = "\n".join(f".. |{name}| replace:: \\|{name}\\|" for name in ("y", "dy")) + "\n"

# -- sphinx-gallery (examples/plot_*.py) -------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "show_memory": False,
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "reset_modules": ("matplotlib",),
    "default_thumb_file": None,
}

# -- HTML (the PyData theme, as numpy, scipy and python-control use) ---------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"ddesys {release}"
html_static_path = ["_static"]
html_css_files = ["ddesys.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_show_sourcelink = False
html_context = {"default_mode": "light"}


def _literal_after_summary(app, what, name, obj, options, lines):
    """A one-line summary ending in ``::`` introduces a literal block (the class docstrings' equations);
    numpydoc parses the summary apart from the block, so the marker moves onto a line of its own."""
    if len(lines) > 2 and lines[0].rstrip().endswith("::") and not lines[1].strip() and lines[2][:1] == " ":
        lines[0:2] = [lines[0].rstrip()[:-1], "", "::", ""]


def _balanced_summary(extract):
    """Sphinx 9.0's autosummary may cut a summary at a period inside inline code (``w . x``): then the
    first stanza is the summary."""
    def extract_summary(doc, settings):
        summary = extract(doc, settings)
        if summary.count("``") % 2:
            stanza = []
            for line in doc:
                if not line.strip():
                    if stanza:
                        break
                    continue
                stanza.append(line.strip())
            summary = " ".join(stanza)
        return summary
    return extract_summary


def _unlisted_reports(app, docname, source):
    """guide/results lists the measured reports under titles; a report added later joins that list under
    its own title (so no report page is left outside the navigation)."""
    if docname != "guide/results":
        return
    text = source[0]
    listed = set(re.findall(r"</([^>]+)>", text))
    extra = sorted(d for d in app.env.found_docs
                   if d.startswith(("experiments/", "verification/")) and d not in listed)
    if extra:
        end = text.rindex("```")
        source[0] = text[:end] + "".join(f"/{d}\n" for d in extra) + text[end:]


def setup(app):
    from sphinx.ext import autosummary

    autosummary.extract_summary = _balanced_summary(autosummary.extract_summary)
    app.connect("autodoc-process-docstring", _literal_after_summary, priority=400)   # before numpydoc
    app.connect("source-read", _unlisted_reports)

