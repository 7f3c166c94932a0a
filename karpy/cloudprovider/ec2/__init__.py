"""karpy's AWS cloud provider: EC2 capacity for EKS through boto3 (``karpy controller --cloud-provider aws``).

Modules: :mod:`.settings` (CLUSTER_NAME and the other AWS settings), :mod:`.clients` (boto3 clients, retries,
error codes), :mod:`.nodeclass` (EC2NodeClass status), :mod:`.instancetypes` (instance types, offerings and
prices from the account), :mod:`.userdata` and :mod:`.launch` (launch templates, CreateFleet, the
unavailable-offerings cache), :mod:`.provider` (the CloudProvider and its controllers) and
:mod:`.interruption` (the SQS interruption queue). Only :mod:`.clients` imports boto3, when the provider starts.
"""
