"""boto3 clients for karpy's AWS provider, and what its errors mean.

One boto3 Session (credentials from boto3's chain: environment, profile, IRSA web identity, EKS Pod Identity,
instance metadata), one client per service, shared by karpy's threads (boto3 clients are thread-safe).
Throttling, 5xx and connection errors are retried by botocore's ``standard`` mode with exponential backoff
(``max_attempts``). ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_EC2`` etc.) are honoured by botocore itself.
boto3 is imported here only, when the provider starts.
"""

from __future__ import annotations

from typing import Any

USER_AGENT = "karpy"
TIMEOUT = 240  # seconds, upstream's SDK client timeout

# Error codes (upstream's pkg/errors)
NOT_FOUND_CODES = frozenset({
    "InvalidInstanceID.NotFound", "InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound",
    "InvalidCapacityReservationId.NotFound", "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue",
    "NoSuchEntity", "ParameterNotFound", "NoSuchEntityException", "ResourceNotFoundException",
})
# fleet errors that mean "no capacity for this offering now" (the unavailable-offerings cache)
ICE_CODES = frozenset({
    "InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "UnfulfillableCapacity",
    "Unsupported", "InsufficientFreeAddressesInSubnet", "MaxFleetCountExceeded", "ReservationCapacityExceeded",
})
UNAUTHORIZED_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthFailure"})
# fleet error code -> the reason a NodeClaim's Launched condition carries
LAUNCH_REASONS = {
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": "SpotSLRCreationFailed",
    "UnauthorizedOperation": "Unauthorized",
    "AuthFailure": "AMIAuthorizationFailure",
    "InvalidParameter": "SecurityGroupSubnetVPCMismatch",
    "InvalidParameterValue": "InstanceProfileNameInvalid",
    "InvalidLaunchTemplateName.NotFoundException": "LaunchTemplateNotFound",
    "InvalidUserData.Malformed": "UserDataSizeLimitExceeded",
    "InvalidAMIID.Malformed": "InvalidAMIID",
    "InvalidAMIID.NotFound": "AMINotFound",
    "RequestLimitExceeded": "RequestLimitExceeded",
    "InternalError": "InternalError",
    "PendingVerification": "AccountPendingVerification",
    "MaxFleetCountExceeded": "FleetQuotaExceeded",
    "MaxSpotInstanceCountExceeded": "SpotQuotaExceeded",
    "VcpuLimitExceeded": "VCPULimitExceeded",
    "InsufficientFreeAddressesInSubnet": "InsufficientFreeAddressesInSubnet",
}


class ProviderConfigError(Exception):
    """The AWS provider cannot start (no region, no credentials, ...): exit 2 with this message."""


def error_code(e: BaseException) -> str:
    resp = getattr(e, "response", None)
    if isinstance(resp, dict):
        return str((resp.get("Error") or {}).get("Code") or "")
    return ""


def error_message(e: BaseException) -> str:
    resp = getattr(e, "response", None)
    if isinstance(resp, dict):
        return str((resp.get("Error") or {}).get("Message") or e)
    return str(e)


def is_not_found(e: BaseException) -> bool:
    return error_code(e) in NOT_FOUND_CODES


def is_unauthorized(e: BaseException) -> bool:
    return error_code(e) in UNAUTHORIZED_CODES


def pricing_region(region: str) -> str:
    """Where the Pricing API answers for ``region`` (upstream's choice)."""
    if region.startswith("cn-"):
        return "cn-northwest-1"
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith("eu-"):
        return "eu-central-1"
    return "us-east-1"


class Clients:
    """boto3 clients for ec2, ssm, iam, eks, sqs and pricing in one region."""

    def __init__(self, region: str | None = None, max_attempts: int = 5, session: Any = None):
        try:
            import boto3
            from botocore.config import Config
        except ImportError:  # pragma: no cover - the aws extra is not installed
            raise ProviderConfigError("--cloud-provider aws needs boto3: pip install 'karpy[aws]'") from None
        self.session = session or boto3.session.Session()
        self.region = region or self.session.region_name or _imds_region()
        if not self.region:
            raise ProviderConfigError("no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or a profile's region)")
        self.config = Config(retries={"mode": "standard", "max_attempts": max_attempts}, user_agent_extra=USER_AGENT,
                             connect_timeout=10, read_timeout=TIMEOUT, max_pool_connections=50)
        self.ec2 = self._client("ec2")
        self.ssm = self._client("ssm")
        self.iam = self._client("iam")
        self.eks = self._client("eks")
        self.sqs = self._client("sqs")
        self.pricing = self._client("pricing", pricing_region(self.region))

    def _client(self, service: str, region: str | None = None) -> Any:
        return self.session.client(service, region_name=region or self.region, config=self.config)

    def check_credentials(self) -> None:
        """Credentials resolve (boto3's chain); a ProviderConfigError naming the problem otherwise."""
        if self.session.get_credentials() is None:
            raise ProviderConfigError("no AWS credentials: boto3's chain found none (environment, profile, "
                                      "IRSA, EKS Pod Identity, instance metadata)")


def _imds_region() -> str | None:
    import os

    if os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return None
    try:
        from botocore.utils import InstanceMetadataRegionFetcher

        return InstanceMetadataRegionFetcher(timeout=1, num_attempts=1).retrieve_region()
    except Exception:  # noqa: BLE001 - no metadata service: no region from it
        return None
