"""sparkbuild: vLLM from a pull-request branch, patched for sm_121, built offline."""

__version__ = "0.1.0"
