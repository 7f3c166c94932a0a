"""karpy's AWS cloud provider: EC2 capacity for EKS through boto3 (``karpy controller --cloud-provider aws``).

Modules: :mod:`.settings` (CLUSTER_NAME and the other AWS settings), :mod:`.clients` (boto3 clients, retries,
error codes), :mod:`.batcher` (CreateFleet, DescribeInstances and TerminateInstances batched), :mod:`.nodeclass`
(EC2NodeClass status: subnets, security groups, AMIs, instance profile, capacity reservations),
:mod:`.instancetypes` (instance types, offerings and prices from the account), :mod:`.userdata` (user data per AMI
family), :mod:`.provider` (the CloudProvider: launch templates, CreateFleet, the unavailable-offerings cache,
get/list/delete, drift) and :mod:`.controllers` (NodeClass status and finalizer, garbage collection, tagging, the
SQS interruption queue). Only :mod:`.clients` imports boto3, when the provider starts.
"""
