"""Input manifests: loading, validation and defaulting, as the Kubernetes API server would do them.

Public API:

- :func:`load_documents` (paths, "-" for stdin) -> :class:`LoadResult`
  (``documents``, ``errors``);
- :class:`Document` (file, index, kind, api_version, name, namespace, obj);
- :func:`validate_object` for one in-memory manifest (e.g. after a patch);
- :data:`ACCEPTED_KINDS`, :func:`is_namespaced`.
"""

from .kinds import ACCEPTED_KINDS, is_namespaced
from .loader import Document, LoadResult, load_documents, load_text, validate_object

__all__ = [
    "ACCEPTED_KINDS",
    "Document",
    "LoadResult",
    "is_namespaced",
    "load_documents",
    "load_text",
    "validate_object",
]
