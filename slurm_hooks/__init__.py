__version__ = "0.1.0"

# What every module's `if TYPE_CHECKING:` reads: typing's own costs milliseconds to
# import on every run, and type checkers treat the name itself as true.
TYPE_CHECKING = False


def library_dir() -> str:
    """The absolute directory holding the slurm_hooks package this process runs: what a
    child started with `python -I` puts on its path to run this very installation."""
    import os
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
