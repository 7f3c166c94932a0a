"""A fake Azure Resource Manager and Microsoft Entra token endpoint, over HTTPS on 127.0.0.1.

The real Azure SDK clients talk to it unpatched: ``AZURE_ENVIRONMENT_FILEPATH`` names its endpoints, its CA
is trusted through ``REQUESTS_CA_BUNDLE``/``SSL_CERT_FILE``, and ``DefaultAzureCredential`` gets its token
through workload identity (``AZURE_FEDERATED_TOKEN_FILE``) from the fake's own token endpoint, so every call
goes through the SDK's pipeline: bearer tokens, retries, long-running-operation polling.

It implements the calls karpy's Azure provider makes, with ARM's shapes: network interfaces and virtual
machines (PUT, GET, DELETE; PUTs and DELETEs are long-running operations answered 201/202 with an
``Azure-AsyncOperation`` URL that reports ``InProgress`` then ``Succeeded`` or ``Failed``), VM extensions,
resource SKUs (built from karpy's Azure catalog for the location), subnets (GET), network security groups
and load balancers of the node resource group, community gallery image versions, and Resource Graph queries (the
``where`` clauses karpy writes, paged with ``$skipToken``). Errors carry ARM's JSON
(``{"error": {"code", "message", "details"}}``); :meth:`FakeARM.fail` injects them per operation, at once (the
PUT is refused) or late (the operation fails), and :meth:`FakeARM.throttle` answers 429 with Retry-After.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import ssl
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUBSCRIPTION = "12345678-1234-1234-1234-123456789012"
TENANT = "87654321-4321-4321-4321-210987654321"
CLIENT_ID = "11111111-2222-3333-4444-555555555555"
NODE_RG = "MC_rg_cluster_eastus"
CLUSTER_ID = "12345678"
CIG_UBUNTU = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2"
CIG_AZURELINUX = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def arm_family(series: str) -> str:
    """The ARM quota family of a size's series: Dpls_v6 -> standardDPLSv6Family."""
    base, _, version = series.partition("_")
    return f"standard{base[0]}{base[1:].upper()}{version}Family"


def load_catalog_sizes() -> list[dict]:
    from karpy.cloudprovider.catalog import load_catalog

    return load_catalog("azure")["sizes"]


def skus_from_catalog(location: str, names: list[str] | None = None) -> list[dict]:
    """Resource SKUs (as Microsoft.Compute/skus lists them) for the sizes karpy's Azure catalog prices in
    ``location``: capabilities, zones 1-3 where the region has zones."""
    from karpy.cloudprovider.catalog import load_catalog

    cat = load_catalog("azure")
    zones = [z.rsplit("-", 1)[-1] for z in cat["zones"].get(location, []) if z != "0"]
    out = []
    for s in cat["sizes"]:
        if location not in s["prices"] or (names is not None and s["name"] not in names):
            continue
        series = s.get("series") or s["name"].removeprefix("Standard_")
        local_disk = "d" in (series.split("_")[0][1:])  # a 'd' in the series' letters: a local temp disk
        caps = {
            "vCPUs": str(s["vcpu"]), "MemoryGB": f"{s['memory'] / 1024:g}",
            "CpuArchitectureType": "Arm64" if s["arch"] == "arm64" else "x64",
            "HyperVGenerations": "V2" if s["arch"] == "arm64" else "V1,V2",
            "PremiumIO": "True" if s.get("premium_io") else "False",
            "LowPriorityCapable": "True",
            "EphemeralOSDiskSupported": "True" if local_disk else "False",
            "MaxResourceVolumeMB": str(s["vcpu"] * 37888 if local_disk else 0),
            "CachedDiskBytes": str(s["vcpu"] * 25 * 2**30 if local_disk else 0),
            "EncryptionAtHostSupported": "True",
        }
        if s.get("accelerated_networking") is not None:
            caps["AcceleratedNetworkingEnabled"] = str(bool(s["accelerated_networking"]))
        gpus = s.get("gpus") or {}
        if gpus.get("count"):
            caps["GPUs"] = str(gpus["count"])
        out.append({
            "resourceType": "virtualMachines", "name": s["name"], "tier": "Standard",
            "size": s["name"].removeprefix("Standard_"), "family": arm_family(series), "locations": [location],
            "locationInfo": [{"location": location, "zones": list(zones), "zoneDetails": []}],
            "capabilities": [{"name": k, "value": v} for k, v in caps.items()], "restrictions": [],
        })
    return out


class Fault:
    def __init__(self, op: str, code: str, message: str, status: int, late: bool, times: int, name: str | None):
        self.op, self.code, self.message, self.status, self.late, self.times, self.name = \
            op, code, message, status, late, times, name


class FakeARM:
    def __init__(self, location: str = "eastus", node_rg: str = NODE_RG, skus: list[dict] | None = None,
                 op_polls: int = 1, page_size: int = 1000):
        self.location = location
        self.node_rg = node_rg
        self.skus = skus if skus is not None else skus_from_catalog(location)
        self.op_polls = op_polls  # how many polls an operation answers InProgress before it ends
        self.page_size = page_size  # Resource Graph rows per page
        self.lock = threading.RLock()
        self.vms: dict[str, dict] = {}
        self.nics: dict[str, dict] = {}
        self.extensions: dict[tuple[str, str], dict] = {}
        # the AKS machine API: machines (by lower-case name) of the agent pools of mode Machines of one cluster
        self.machines: dict[str, dict] = {}
        self.machine_pools = {"machines"}
        self.cluster = ("rg", "workshop")  # (resource group, managed cluster)
        self.machines_page_size = 1000
        self.ops: dict[str, dict] = {}
        self.faults: list[Fault] = []
        self.throttles: dict[str, int] = {}
        self.requests: list[dict] = []
        self.tokens_issued = 0
        self.image_versions: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (gallery, image) -> [(ver, date)]
        for img in ("2204gen2containerd", "2204containerd", "2204gen2arm64containerd", "2404gen2containerd",
                    "2404containerd", "2404gen2arm64containerd"):
            self.image_versions[(CIG_UBUNTU, img)] = [("202501.01.0", "2025-01-02T00:00:00Z"),
                                                      ("202506.01.0", "2025-06-02T00:00:00Z")]
        for img in ("V3gen2", "V3", "V3gen2arm64", "V2gen2", "V2", "V2gen2arm64"):
            self.image_versions[(CIG_AZURELINUX, img)] = [("202506.01.0", "2025-06-02T00:00:00Z")]
        self.nsgs = [f"aks-agentpool-{CLUSTER_ID}-nsg"]
        self.subnets = {("rg-net", "vnet-1", "nodes")}  # (resource group, virtual network, subnet), lower case
        self.lbs = {"kubernetes": ["kubernetes", "aksOutboundBackendPool", "kubernetes-ipv6"]}
        # the Azure Retail Prices API (public, no token): karpy's static on-demand and spot prices of the location,
        # per SKU name; tests change them, and price_failures answers that many fetches 500
        self.retail_prices: dict[str, dict] = {}
        listed = {k["name"] for k in self.skus}
        for s in load_catalog_sizes():
            p = s["prices"].get(location)
            if p and s["name"] in listed:
                self.retail_prices[s["name"]] = {"on_demand": p["on_demand"], "spot": p.get("spot")}
        self.prices_page_size = 100
        self.price_failures = 0
        # Microsoft.Compute usages of the location: ARM quota family (or "cores") -> (current vCPUs, limit)
        self.usages: dict[str, tuple[int, int]] = {"cores": (0, 350)}
        for sku in self.skus:
            self.usages.setdefault(sku["family"], (0, 100))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.certs: Any = None

    # --- control ------------------------------------------------------------------------------
    def fail(self, op: str, code: str, message: str = "", status: int = 409, late: bool = False, times: int = 1,
             name: str | None = None) -> None:
        """The next ``times`` calls of ``op`` ("vm.put", "nic.put", "vm.delete", "vm.get", "skus", ...) fail with
        ARM error ``code``; ``late``: the PUT is accepted and its long-running operation fails."""
        with self.lock:
            self.faults.append(Fault(op, code, message or f"{code} (injected)", status, late, times, name))

    def throttle(self, op: str, times: int = 1) -> None:
        """The next ``times`` calls of ``op`` answer 429 Too Many Requests with Retry-After: 0."""
        with self.lock:
            self.throttles[op] = self.throttles.get(op, 0) + times

    def publish_image(self, gallery: str, image: str, version: str, date: str) -> None:
        with self.lock:
            self.image_versions.setdefault((gallery, image), []).append((version, date))

    def calls(self, method: str, pattern: str) -> list[dict]:
        rx = re.compile(pattern, re.I)
        with self.lock:
            return [r for r in self.requests if r["method"] == method and rx.search(r["path"])]

    def _fault(self, op: str, name: str | None) -> Fault | None:
        for f in self.faults:
            if f.op == op and f.times > 0 and (f.name is None or f.name == name):
                f.times -= 1
                return f
        return None

    # --- server -------------------------------------------------------------------------------
    def start(self) -> "FakeARM":
        from karpy.sandbox.tls import generate

        self.certs = generate("127.0.0.1", prefix="karpy-fakearm-tls-")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certs.cert_file, self.certs.key_file)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                status, headers, payload = fake.handle(self.command, self.path, dict(self.headers.items()), body)
                data = b"" if payload is None else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if payload is not None and "Content-Type" not in headers:
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-ms-request-id", str(uuid.uuid4()))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _do

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakearm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.certs is not None:
            self.certs.remove()
            self.certs = None

    def environment(self, directory) -> dict[str, str]:
        """The variables a karpy controller needs to reach this fake: the cloud's endpoints, the CA, and a
        workload identity (client ID, tenant, federated token file, authority host)."""
        from pathlib import Path

        d = Path(directory)
        (d / "fakearm-ca.pem").write_bytes(self.certs.ca_pem)
        (d / "fakearm-env.json").write_text(json.dumps({
            "name": "AzurePublicCloud", "resourceManagerEndpoint": self.url + "/",
            "activeDirectoryEndpoint": self.url + "/", "tokenAudience": "https://management.core.windows.net/"}))
        (d / "federated-token").write_text("eyJ.fake-service-account-token.sig")
        ca = str(d / "fakearm-ca.pem")
        return {"AZURE_ENVIRONMENT_FILEPATH": str(d / "fakearm-env.json"), "REQUESTS_CA_BUNDLE": ca,
                "SSL_CERT_FILE": ca, "AZURE_CLIENT_ID": CLIENT_ID, "AZURE_TENANT_ID": TENANT,
                "AZURE_FEDERATED_TOKEN_FILE": str(d / "federated-token"), "AZURE_AUTHORITY_HOST": self.url + "/",
                "AZURE_RETAIL_PRICES_ENDPOINT": self.url + "/api/retail/prices"}

    # --- routing ------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers: dict, body: bytes) -> tuple[int, dict, Any]:
        u = urllib.parse.urlsplit(raw_path)
        path = urllib.parse.unquote(u.path)
        query = dict(urllib.parse.parse_qsl(u.query))
        doc = None
        if body:
            try:
                doc = json.loads(body)
            except ValueError:
                doc = body.decode(errors="replace")
        with self.lock:
            self.requests.append({"method": method, "path": path, "query": query, "body": doc,
                                  "headers": {k.lower(): v for k, v in headers.items()}})
        # Microsoft Entra (the token endpoint MSAL discovers from the authority)
        m = re.match(r"^/([^/]+)/v2\.0/\.well-known/openid-configuration$", path)
        if m:
            t = m.group(1)
            return 200, {}, {"token_endpoint": f"{self.url}/{t}/oauth2/v2.0/token",
                             "authorization_endpoint": f"{self.url}/{t}/oauth2/v2.0/authorize",
                             "issuer": f"{self.url}/{t}/v2.0", "device_authorization_endpoint":
                                 f"{self.url}/{t}/oauth2/v2.0/devicecode"}
        m = re.match(r"^/([^/]+)/oauth2/v2\.0/token$", path)
        if m and method == "POST":
            form = dict(urllib.parse.parse_qsl(body.decode()))
            if form.get("client_id") != CLIENT_ID or not form.get("client_assertion"):
                return 401, {}, {"error": "invalid_client", "error_description": "AADSTS700016: unknown client"}
            with self.lock:
                self.tokens_issued += 1
                n = self.tokens_issued
            return 200, {}, {"token_type": "Bearer", "expires_in": 3600, "ext_expires_in": 3600,
                             "access_token": f"fake-arm-token-{n}"}
        if path == "/api/retail/prices" and method == "GET":
            with self.lock:
                return self._retail_prices(query)
        if not (headers.get("Authorization") or headers.get("authorization") or "").startswith("Bearer fake-arm-token-"):
            return 401, {"WWW-Authenticate": 'Bearer authorization_uri="x", error="invalid_token"'}, \
                {"error": {"code": "AuthenticationFailed", "message": "no valid bearer token"}}
        with self.lock:
            return self._arm(method, path, query, doc)

    def _error(self, status: int, code: str, message: str, headers: dict | None = None) -> tuple[int, dict, Any]:
        return status, headers or {}, {"error": {"code": code, "message": message, "details": []}}

    def _arm(self, method: str, path: str, query: dict, doc: Any) -> tuple[int, dict, Any]:
        sub = f"/subscriptions/{SUBSCRIPTION}"
        rg_rx = rf"(?i)^{sub}/resourceGroups/([^/]+)/providers/"
        mc = rg_rx + r"Microsoft\.ContainerService/managedClusters/([^/]+)/agentPools/([^/]+)/"
        routes = [
            ("machine", mc + r"machines/([^/]+)$"),
            ("machines", mc + r"machines$"),
            ("deletemachines", mc + r"deleteMachines$"),
            ("vm.ext", rg_rx + r"Microsoft\.Compute/virtualMachines/([^/]+)/extensions/([^/]+)$"),
            ("vm", rg_rx + r"Microsoft\.Compute/virtualMachines/([^/]+)$"),
            ("nic", rg_rx + r"Microsoft\.Network/networkInterfaces/([^/]+)$"),
            ("subnet", rg_rx + r"Microsoft\.Network/virtualNetworks/([^/]+)/subnets/([^/]+)$"),
            ("nsgs", rg_rx + r"Microsoft\.Network/networkSecurityGroups$"),
            ("lbs", rg_rx + r"Microsoft\.Network/loadBalancers$"),
            ("skus", rf"(?i)^{sub}/providers/Microsoft\.Compute/skus$"),
            ("usages", rf"(?i)^{sub}/providers/Microsoft\.Compute/locations/([^/]+)/usages$"),
            ("cig", rf"(?i)^{sub}/providers/Microsoft\.Compute/locations/([^/]+)/communityGalleries/([^/]+)/images/([^/]+)/versions$"),
            ("arg", r"(?i)^/providers/Microsoft\.ResourceGraph/resources$"),
            ("opstatus", r"^/fakeops/([^/]+)$"),
        ]
        for kind, rx in routes:
            m = re.match(rx, path)
            if m:
                break
        else:
            return self._error(404, "InvalidResourceType", f"the fake has no route for {method} {path}")
        op = f"{kind}.{method.lower()}" if kind in ("vm", "nic", "vm.ext", "machine") else kind
        name = m.group(2).lower() if kind in ("vm", "nic", "vm.ext") else \
            m.group(4).lower() if kind == "machine" else None
        if self.throttles.get(op):
            self.throttles[op] -= 1
            return self._error(429, "TooManyRequests", "throttled (injected)", {"Retry-After": "0"})
        f = self._fault(op, name)
        if f is not None and not f.late:
            return self._error(f.status, f.code, f.message)
        return getattr(self, "_" + kind.replace(".", "_"))(method, m, query, doc, f)

    # --- operations ---------------------------------------------------------------------------
    def _op(self, on_done, error: dict | None = None) -> dict:
        oid = uuid.uuid4().hex
        self.ops[oid] = {"left": self.op_polls, "done": on_done, "error": error, "finished": False}
        return {"Azure-AsyncOperation": f"{self.url}/fakeops/{oid}?api-version=2024-07-01",
                "Location": f"{self.url}/fakeops/{oid}?api-version=2024-07-01&monitor=true"}

    def _opstatus(self, method, m, query, doc, fault):  # noqa: ANN001 - the route table's signature
        op = self.ops.get(m.group(1))
        if op is None:
            return self._error(404, "NotFound", "no such operation")
        if op["left"] > 0:
            op["left"] -= 1
            return 200, {}, {"status": "InProgress"}
        if not op["finished"]:
            op["finished"] = True
            op["done"]()
        if op["error"] is not None:
            return 200, {}, {"status": "Failed", "error": op["error"]}
        if query.get("monitor"):
            return 200, {}, {}
        return 200, {}, {"status": "Succeeded"}

    def _id(self, rg: str, provider: str, name: str) -> str:
        return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/{provider}/{name}"

    # --- NICs ---------------------------------------------------------------------------------
    def _nic(self, method, m, query, doc, fault):  # noqa: ANN001
        rg, name = m.group(1), m.group(2)
        key = name.lower()
        if method == "GET":
            nic = self.nics.get(key)
            if nic is None:
                return self._error(404, "NotFound", f"Resource {name} not found")
            return 200, {}, nic
        if method == "DELETE":
            if key not in self.nics:
                return 204, {}, None
            if self.nics[key].get("_vm") and self.nics[key]["_vm"] in self.vms:
                return self._error(400, "NicInUse", f"Network Interface {name} is used by existing resource")
            del self.nics[key]
            return 200, {}, None
        nic = dict(doc or {})
        nic.update({"id": self._id(rg, "Microsoft.Network/networkInterfaces", name), "name": name,
                    "type": "Microsoft.Network/networkInterfaces"})
        props = dict(nic.get("properties") or {})
        props["provisioningState"] = "Succeeded"
        nic["properties"] = props
        nic["_created"] = _now()
        existed = key in self.nics
        self.nics[key] = nic
        return (200 if existed else 201), self._op(lambda: None), self._public(nic)

    @staticmethod
    def _public(obj: dict) -> dict:
        return {k: v for k, v in obj.items() if not k.startswith("_")}

    # --- VMs ----------------------------------------------------------------------------------
    def _vm(self, method, m, query, doc, fault):  # noqa: ANN001
        rg, name = m.group(1), m.group(2)
        key = name.lower()
        vm = self.vms.get(key)
        if method == "GET":
            if vm is None:
                return self._error(404, "ResourceNotFound",
                                   f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group '{rg}' was not found.")
            return 200, {}, self._public(vm)
        if method == "DELETE":
            if vm is None:
                return 204, {}, None
            vm["properties"]["provisioningState"] = "Deleting"

            def gone() -> None:
                self.vms.pop(key, None)
                for ref in (vm["properties"].get("networkProfile") or {}).get("networkInterfaces") or ():
                    if (ref.get("properties") or {}).get("deleteOption") == "Delete":
                        self.nics.pop(ref["id"].rsplit("/", 1)[-1].lower(), None)
                for k in [k for k in self.extensions if k[0] == key]:
                    del self.extensions[k]

            err = {"code": fault.code, "message": fault.message} if fault is not None else None
            return 202, self._op(gone if err is None else (lambda: None), err), None
        # PUT
        if vm is not None:
            if (doc or {}).get("zones") != vm.get("zones"):
                return self._error(409, "PropertyChangeNotAllowed", "Changing property 'zones' is not allowed.")
            return 200, {}, self._public(vm)
        for ref in (((doc or {}).get("properties") or {}).get("networkProfile") or {}).get("networkInterfaces") or ():
            nic = self.nics.get(ref["id"].rsplit("/", 1)[-1].lower())
            if nic is None:
                return self._error(400, "InvalidResourceReference", f"Resource {ref['id']} referenced by resource "
                                   f"{name} was not found.")
            nic["_vm"] = key
        vm = dict(doc)
        vm.update({"id": self._id(rg, "Microsoft.Compute/virtualMachines", name), "name": name,
                   "type": "Microsoft.Compute/virtualMachines"})
        props = dict(vm.get("properties") or {})
        props.update({"provisioningState": "Creating", "timeCreated": _now(), "vmId": str(uuid.uuid4())})
        vm["properties"] = props
        self.vms[key] = vm
        if fault is not None:  # a late failure: accepted, then the operation fails and the VM stays Failed
            def failed() -> None:
                vm["properties"]["provisioningState"] = "Failed"
            return 201, self._op(failed, {"code": fault.code, "message": fault.message}), self._public(vm)

        def succeeded() -> None:
            vm["properties"]["provisioningState"] = "Succeeded"
        return 201, self._op(succeeded), self._public(vm)

    def _vm_ext(self, method, m, query, doc, fault):  # noqa: ANN001
        vm, ext = m.group(2).lower(), m.group(3)
        if vm not in self.vms:
            return self._error(404, "ParentResourceNotFound", f"virtual machine {vm} not found")
        if method == "GET":
            e = self.extensions.get((vm, ext))
            return (200, {}, e) if e else self._error(404, "NotFound", "no such extension")
        e = dict(doc or {})
        e.update({"id": self.vms[vm]["id"] + f"/extensions/{ext}", "name": ext,
                  "type": "Microsoft.Compute/virtualMachines/extensions"})
        e.setdefault("properties", {})["provisioningState"] = "Succeeded"
        self.extensions[(vm, ext)] = e
        return 201, self._op(lambda: None), e

    # --- retail prices -----------------------------------------------------------------------
    def _retail_prices(self, query: dict) -> tuple[int, dict, Any]:
        """The Retail Prices API's pages: for each SKU the Linux on-demand and spot items the filter selects, and
        the Windows and Low Priority items upstream drops; ``NextPageLink`` while items remain."""
        if self.price_failures:
            self.price_failures -= 1
            return 500, {}, {"error": {"code": "InternalServerError", "message": "retail prices (injected)"}}
        region = re.search(r"armRegionName eq '([^']+)'", query.get("$filter", ""))
        items: list[dict] = []
        if region and region.group(1) == self.location:
            for name, p in sorted(self.retail_prices.items()):
                series = name.removeprefix("Standard_").replace("_", " ")
                base = {"currencyCode": "USD", "armRegionName": self.location, "location": "US East",
                        "serviceName": "Virtual Machines", "serviceFamily": "Compute", "type": "Consumption",
                        "armSkuName": name, "unitOfMeasure": "1 Hour", "isPrimaryMeterRegion": True}
                items.append({**base, "retailPrice": p["on_demand"], "unitPrice": p["on_demand"], "skuName": series,
                              "meterName": series, "productName": f"Virtual Machines {series} Series"})
                items.append({**base, "retailPrice": p["on_demand"] * 1.9, "unitPrice": p["on_demand"] * 1.9,
                              "skuName": series, "meterName": series,
                              "productName": f"Virtual Machines {series} Series Windows"})
                items.append({**base, "retailPrice": p["on_demand"] * 0.2, "unitPrice": p["on_demand"] * 0.2,
                              "skuName": series + " Low Priority", "meterName": series + " Low Priority",
                              "productName": f"Virtual Machines {series} Series"})
                if p.get("spot") is not None:
                    items.append({**base, "retailPrice": p["spot"], "unitPrice": p["spot"], "skuName": series + " Spot",
                                  "meterName": series + " Spot", "productName": f"Virtual Machines {series} Series"})
        skip = int(query.get("$skip") or 0)
        page = items[skip:skip + self.prices_page_size]
        out: dict[str, Any] = {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                               "Items": page, "Count": len(page), "NextPageLink": None}
        if skip + self.prices_page_size < len(items):
            out["NextPageLink"] = (f"{self.url}/api/retail/prices?" + urllib.parse.urlencode(
                {"api-version": query.get("api-version", ""), "$filter": query.get("$filter", ""),
                 "$skip": skip + self.prices_page_size}))
        return 200, {}, out

    # --- lists --------------------------------------------------------------------------------
    def _skus(self, method, m, query, doc, fault):  # noqa: ANN001
        want = re.search(r"location eq '([^']+)'", query.get("$filter", ""))
        return 200, {}, {"value": [s for s in self.skus if not want or want.group(1) in s["locations"]]}

    def _usages(self, method, m, query, doc, fault):  # noqa: ANN001
        return 200, {}, {"value": [
            {"unit": "Count", "currentValue": cur, "limit": lim, "name": {
                "value": name, "localizedValue": "Total Regional vCPUs" if name == "cores" else f"{name} vCPUs"}}
            for name, (cur, lim) in sorted(self.usages.items())]}

    def _subnet(self, method, m, query, doc, fault):  # noqa: ANN001
        rg, vnet, subnet = m.group(1), m.group(2), m.group(3)
        if (rg.lower(), vnet.lower(), subnet.lower()) not in self.subnets:
            return self._error(404, "NotFound", f"Resource /subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/"
                               f"Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet} not found.")
        sid = self._id(rg, "Microsoft.Network/virtualNetworks", f"{vnet}/subnets/{subnet}")
        return 200, {}, {"id": sid, "name": subnet, "type": "Microsoft.Network/virtualNetworks/subnets",
                         "properties": {"addressPrefix": "10.224.0.0/16", "provisioningState": "Succeeded"}}

    def _nsgs(self, method, m, query, doc, fault):  # noqa: ANN001
        rg = m.group(1)
        return 200, {}, {"value": [{"id": self._id(rg, "Microsoft.Network/networkSecurityGroups", n), "name": n,
                                    "location": self.location, "properties": {}} for n in self.nsgs]}

    def _lbs(self, method, m, query, doc, fault):  # noqa: ANN001
        rg = m.group(1)
        out = []
        for lb, pools in self.lbs.items():
            lid = self._id(rg, "Microsoft.Network/loadBalancers", lb)
            out.append({"id": lid, "name": lb, "location": self.location, "properties": {"backendAddressPools": [
                {"id": f"{lid}/backendAddressPools/{p}", "name": p, "properties": {}} for p in pools]}})
        return 200, {}, {"value": out}

    def _cig(self, method, m, query, doc, fault):  # noqa: ANN001
        loc, gallery, image = m.group(1), m.group(2), m.group(3)
        versions = self.image_versions.get((gallery, image))
        if versions is None:
            return self._error(404, "GalleryImageNotFound", f"image {image} not found in {gallery}")
        return 200, {}, {"value": [{
            "name": v, "location": loc, "type": "Microsoft.Compute/locations/communityGalleries/images/versions",
            "identifier": {"uniqueId": f"/CommunityGalleries/{gallery}/Images/{image}/Versions/{v}"},
            "properties": {"publishedDate": d, "excludeFromLatest": False}} for v, d in versions]}

    def _arg(self, method, m, query, doc, fault):  # noqa: ANN001
        kql = (doc or {}).get("query", "")
        rtype = re.search(r"type =~? '([^']+)'", kql)
        rg = re.search(r"resourceGroup =~? '([^']+)'", kql)
        has = [t for t in re.findall(r"(?<!not\()tags has_cs '([^']+)'", kql)]
        not_has = re.findall(r"not\(tags has_cs '([^']+)'\)", kql)
        tag_eq = re.findall(r"tags\['([^']+)'\] == '([^']+)'", kql)
        rows = []
        kinds = {"microsoft.compute/virtualmachines": self.vms, "microsoft.network/networkinterfaces": self.nics}
        for obj in (kinds.get(rtype.group(1).lower(), {}) if rtype else {}).values():
            tags = obj.get("tags") or {}
            obj_rg = obj["id"].split("/")[4]
            if rg and obj_rg.lower() != rg.group(1).lower():
                continue
            if any(t not in tags for t in has) or any(t in tags for t in not_has):
                continue
            if any(tags.get(k) != v for k, v in tag_eq):
                continue
            rows.append({"id": obj["id"], "name": obj["name"],
                         "type": obj["type"].lower(), "location": obj.get("location"), "resourceGroup": obj_rg.lower(),
                         "tags": tags, "zones": obj.get("zones"), "properties": obj.get("properties")})
        rows.sort(key=lambda r: r["id"])
        start = int(((doc or {}).get("options") or {}).get("$skipToken") or 0)
        page = rows[start:start + self.page_size]
        out = {"totalRecords": len(rows), "count": len(page), "resultTruncated": "false", "data": page, "facets": []}
        if start + self.page_size < len(rows):
            out["$skipToken"] = str(start + self.page_size)
        return 200, {}, out

    # --- the AKS machine API ------------------------------------------------------------------
    def _pool(self, m) -> tuple[str, str, str] | tuple[int, dict, Any]:  # noqa: ANN001
        rg, cluster, pool = m.group(1), m.group(2), m.group(3)
        if (rg.lower(), cluster.lower()) != tuple(x.lower() for x in self.cluster):
            return self._error(404, "ResourceNotFound", f"managed cluster {cluster} in {rg} not found")
        if pool.lower() not in self.machine_pools:
            return self._error(404, "NotFound", f"agent pool {pool} not found")
        return rg, cluster, pool

    def _machine(self, method, m, query, doc, fault):  # noqa: ANN001
        """GET and PUT of one machine: a PUT makes the machine (Creating), whose VM lives in the node resource
        group as aks-<pool>-<machine>-<cluster id>-vm; the operation ends Succeeded, or Failed (a late fault)
        with status.provisioningError whose first detail is the VM's error. The API reports priority only for
        spot machines."""
        pool = self._pool(m)
        if isinstance(pool[0], int):
            return pool
        rg, cluster, pool = pool
        name = m.group(4)
        key = name.lower()
        machine = self.machines.get(key)
        if method == "GET":
            if machine is None:
                return self._error(404, "NotFound", f"machine {name} not found in agent pool {pool}")
            return 200, {}, self._public(machine)
        if method != "PUT":
            return self._error(405, "MethodNotAllowed", f"{method} of a machine")
        if machine is not None:
            return 200, {}, self._public(machine)
        props = dict((doc or {}).get("properties") or {})
        if props.get("priority") == "Regular":
            props.pop("priority")
        vm = f"aks-{pool}-{name}-{CLUSTER_ID}-vm"
        props.update({"provisioningState": "Creating", "resourceId": self._id(
            self.node_rg, "Microsoft.Compute/virtualMachines", vm), "status": {"creationTimestamp": _now()}})
        machine = {"id": self._id(rg, "Microsoft.ContainerService/managedClusters", f"{cluster}/agentPools/{pool}/"
                                  f"machines/{name}"), "name": name,
                   "type": "Microsoft.ContainerService/managedClusters/agentPools/machines", "properties": props}
        if (doc or {}).get("zones"):
            machine["zones"] = list(doc["zones"])
        self.machines[key] = machine
        if fault is not None:
            detail = {"code": fault.code, "message": fault.message}

            def failed() -> None:
                machine["properties"]["provisioningState"] = "Failed"
                machine["properties"]["status"]["provisioningError"] = {
                    "code": "VMCreationFailed", "message": f"creating the VM of machine {name} failed",
                    "details": [detail]}
            return 201, self._op(failed, {"code": "VMCreationFailed", "message": fault.message,
                                          "details": [detail]}), self._public(machine)

        def succeeded() -> None:
            machine["properties"]["provisioningState"] = "Succeeded"
        return 201, self._op(succeeded), self._public(machine)

    def _machines(self, method, m, query, doc, fault):  # noqa: ANN001
        pool = self._pool(m)
        if isinstance(pool[0], int):
            return pool
        rows = sorted((x for x in self.machines.values()), key=lambda x: x["name"])
        start = int(query.get("$skipToken") or 0)
        out: dict[str, Any] = {"value": [self._public(x) for x in rows[start:start + self.machines_page_size]]}
        if start + self.machines_page_size < len(rows):
            out["nextLink"] = (f"{self.url}{urllib.parse.quote(m.group(0))}?api-version="
                               f"{query.get('api-version', '')}&$skipToken={start + self.machines_page_size}")
        return 200, {}, out

    def _deletemachines(self, method, m, query, doc, fault):  # noqa: ANN001
        """POST deleteMachines {"machineNames": [...]}: the machines turn Deleting, then are gone."""
        pool = self._pool(m)
        if isinstance(pool[0], int):
            return pool
        if method != "POST":
            return self._error(405, "MethodNotAllowed", f"{method} of deleteMachines")
        names = [str(n).lower() for n in ((doc or {}).get("machineNames") or ())]
        missing = [n for n in names if n not in self.machines]
        if not names or missing:
            return self._error(404, "NotFound", f"machines {', '.join(missing) or '(none)'} not found")
        for n in names:
            self.machines[n]["properties"]["provisioningState"] = "Deleting"

        def gone() -> None:
            for n in names:
                self.machines.pop(n, None)
        err = {"code": fault.code, "message": fault.message} if fault is not None and fault.late else None
        return 202, self._op(gone if err is None else (lambda: None), err), None
