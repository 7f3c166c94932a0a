"""The Azure SDK clients of karpy's Azure provider: the only module that imports the Azure SDK.

Credentials come from ``DefaultAzureCredential`` (on AKS: workload identity, whose webhook injects
``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID``, ``AZURE_FEDERATED_TOKEN_FILE`` and ``AZURE_AUTHORITY_HOST``; else a
service principal's variables or a managed identity), against the authority of the selected cloud. With
``AZURE_ENVIRONMENT_FILEPATH`` (Azure Stack and other private clouds) Entra instance discovery is off, as those
authorities are not known to the public cloud. Clients talk to the cloud's Resource Manager endpoint with the
cloud's token scope; the SDK's retry policy retries 408/429/5xx with backoff and honours ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .settings import AzureSettings


class ProviderConfigError(Exception):
    """The provider cannot start: no SDK, no credential, no access. The command exits 2 with this message."""


@dataclass
class AzureClients:
    compute: Any
    network: Any
    graph: Any
    credential: Any
    subscription_id: str
    arm: Any = None  # a bare ARM pipeline (the AKS machine API, which the stable SDK cannot create machines with)


def error_code(e: BaseException) -> str:
    """ARM's error code of an SDK error ("" when there is none): the code of the error body, else the first
    detail's."""
    err = getattr(e, "error", None)
    code = getattr(err, "code", None) or ""
    if not code:
        details = getattr(err, "details", None) or ()
        code = getattr(details[0], "code", "") if details else ""
    return str(code or "")


def error_message(e: BaseException) -> str:
    err = getattr(e, "error", None)
    return str(getattr(err, "message", None) or getattr(e, "message", None) or e)


def status_code(e: BaseException) -> int | None:
    return getattr(e, "status_code", None) or getattr(getattr(e, "response", None), "status_code", None)


def is_not_found(e: BaseException) -> bool:
    return status_code(e) == 404 or error_code(e) in ("NotFound", "ResourceNotFound")


def make_clients(s: AzureSettings) -> AzureClients:
    try:
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.compute import ComputeManagementClient
        from azure.mgmt.network import NetworkManagementClient
        from azure.mgmt.resourcegraph import ResourceGraphClient
    except ImportError:
        raise ProviderConfigError("--cloud-provider azure needs the Azure SDK: pip install 'karpy[azure]'") from None
    kw: dict[str, Any] = {"authority": s.cloud.authority}
    if s.cloud.from_file:  # a private cloud's authority is unknown to Entra's instance discovery
        kw["disable_instance_discovery"] = True
    credential = DefaultAzureCredential(**kw)
    common = {"base_url": s.cloud.resource_manager, "credential_scopes": [s.cloud.scope]}
    return AzureClients(
        compute=ComputeManagementClient(credential, s.subscription_id, **common),
        network=NetworkManagementClient(credential, s.subscription_id, **common),
        graph=ResourceGraphClient(credential, **common),
        credential=credential, subscription_id=s.subscription_id,
        arm=arm_pipeline(credential, s) if s.provision_mode != "aksscriptless" else None)


def arm_pipeline(credential: Any, s: AzureSettings) -> Any:
    """An ``ARMPipelineClient`` with the policies the generated management clients use: bearer tokens for the
    cloud's scope (with ARM's claims challenges), retries of 408/429/5xx honouring ``Retry-After``, redirects,
    request IDs and ARM's HTTP logging. azure-mgmt-containerservice's stable API has no machine PUT (only GET,
    list and deleteMachines), so karpy sends the AKS machine API's requests through this pipeline."""
    from azure.core.pipeline import policies
    from azure.mgmt.core import ARMPipelineClient
    from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy, ARMHttpLoggingPolicy

    chain = [policies.RequestIdPolicy(), policies.HeadersPolicy(),
             policies.UserAgentPolicy(sdk_moniker="karpy-aksmachines"), policies.ProxyPolicy(),
             policies.ContentDecodePolicy(), policies.RedirectPolicy(), policies.RetryPolicy(),
             ARMChallengeAuthenticationPolicy(credential, s.cloud.scope), policies.CustomHookPolicy(),
             policies.NetworkTraceLoggingPolicy(), policies.DistributedTracingPolicy(),
             policies.SensitiveHeaderCleanupPolicy(), ARMHttpLoggingPolicy()]
    return ARMPipelineClient(base_url=s.cloud.resource_manager, policies=chain)


def check_credential(c: AzureClients, s: AzureSettings, timeout: float = 5.0) -> None:
    """Fetch one token at start, as upstream does: a controller that cannot authenticate says so and exits."""
    try:
        c.credential.get_token(s.cloud.scope)
    except Exception as e:  # noqa: BLE001 - azure-identity raises ClientAuthenticationError and others
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ProviderConfigError(f"--cloud-provider azure: no Azure credential ({first}); on AKS use workload "
                                  "identity (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE)") from None
