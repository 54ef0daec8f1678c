"""semsearch: learn, measure and serve semantic search models.

Layers (see DESIGN.md): data -> text -> models -> training -> index -> ranking -> serving,
with evaluation reading runs from anywhere and experiments tying them together.
"""

__version__ = "0.1.0"
