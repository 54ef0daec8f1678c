"""The search service: a FastAPI app over a search bundle (``create_app``), run by
``semsearch serve BUNDLE``."""

from .app import create_app
from .options import ServeOptions

__all__ = ["ServeOptions", "create_app"]
