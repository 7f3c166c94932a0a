"""karpy's Azure cloud provider: AKS nodes as Azure VMs through the Azure SDK (``karpy controller --cloud-provider azure``).

Modules: :mod:`.settings` (upstream's AKS settings: CLUSTER_NAME, LOCATION, AZURE_NODE_RESOURCE_GROUP, ...),
:mod:`.clients` (DefaultAzureCredential and the SDK clients for the selected cloud), :mod:`.skus` (instance types
from the Resource SKUs API, karpy's static prices), :mod:`.offerings` (Azure's capacity error codes and the
unavailable-offerings cache), :mod:`.bootstrap` (the custom data the AKS node image runs), :mod:`.provider` (the
CloudProvider: NIC and VM, get, list, delete, drift, garbage collection). Only :mod:`.clients` imports the Azure
SDK, when the provider starts; :mod:`karpy.cloudprovider.azure` stays the offline catalog ``karpy simulate`` uses.
"""
