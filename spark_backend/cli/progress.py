"""Progress for long work (:class:`theory.progress.Progress`, where every layer can use it)."""

from theory.progress import Progress

__all__ = ["Progress"]
