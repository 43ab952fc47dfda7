"""pe.utils — helpers shared by the Python API (unique names)."""
from . import unique_name  # noqa: F401
