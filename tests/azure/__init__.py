# tests/ is on sys.path (it has no __init__.py), so this package is importable as ``azure``: extend its path
# with the Azure SDK's ``azure`` namespace so that ``azure.core``, ``azure.identity`` and ``azure.mgmt`` resolve.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
