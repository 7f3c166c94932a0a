// The official JavaScript Kubernetes client (@kubernetes/client-node) against karpy sandbox, with the
// kubeconfig as the sandbox wrote it: the server is verified with its certificate-authority-data.
//
//   node client.mjs KUBECONFIG NAMESPACE
//
// Lists namespaces, creates a ConfigMap and reads it back, watches pods while one is created, and prints
// what it saw as one JSON object on stdout. Any error prints {"error": ...} and exits 1.
import * as k8s from '@kubernetes/client-node';

const [kubeconfig, namespace] = process.argv.slice(2);

function fail(err) {
  const cause = err && err.cause;
  process.stdout.write(JSON.stringify({
    error: String((err && err.message) || err),
    code: (err && err.code) || (cause && cause.code) || null,
  }) + '\n');
  process.exit(1);
}

async function main() {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const out = {};

  const namespaces = await core.listNamespace();
  out.namespaces = namespaces.items.map((n) => n.metadata.name);

  await core.createNamespace({ body: { metadata: { name: namespace } } });
  const created = await core.createNamespacedConfigMap({
    namespace,
    body: { metadata: { name: 'from-js', labels: { client: 'javascript' } }, data: { greeting: 'hello from node' } },
  });
  out.createdResourceVersion = created.metadata.resourceVersion;
  const read = await core.readNamespacedConfigMap({ name: 'from-js', namespace });
  out.configMap = { name: read.metadata.name, labels: read.metadata.labels, data: read.data };

  // watch pods briefly: the pod created while the watch is open arrives as ADDED
  const events = [];
  const seen = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no watch event for pod from-js within 60 s')), 60000);
    new k8s.Watch(kc).watch(`/api/v1/namespaces/${namespace}/pods`, {},
      (type, obj) => {
        events.push({ type, name: obj.metadata.name });
        if (type === 'ADDED' && obj.metadata.name === 'from-js') {
          clearTimeout(timer);
          resolve();
        }
      },
      (err) => { if (err) { clearTimeout(timer); reject(err); } },
    ).then((controller) => {
      out.watchStarted = true;
      seen.then(() => controller.abort(), () => controller.abort());
      return core.createNamespacedPod({
        namespace,
        body: { metadata: { name: 'from-js' }, spec: { containers: [{ name: 'c', image: 'pause' }] } },
      });
    }).catch(reject);
  });
  await seen;
  out.watchEvents = events;
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(() => process.exit(0), fail);
