"""The paper's synthetic delay tasks (section 5.1, appendix C.2): ``python -m experiments.synthetic``."""
