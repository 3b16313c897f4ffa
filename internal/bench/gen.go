//go:build !benchlean

package main

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// genVersion names the data the generator writes. It is part of the fill
// cache's key: change it whenever the generator's output changes, so that a
// cached etcd is never measured as if it held the new data.
const genVersion = "k8s-proto-v1"

// The generator writes what the kube-apiserver stores in etcd: keys
// "/registry/<resource>/<namespace>/<name>" and values in Kubernetes'
// protobuf envelope ("k8s\x00" + runtime.Unknown{TypeMeta, raw object}),
// with the wire layout of ObjectMeta and friends.
//
// Compressibility comes from the mix more than from any one object, so the
// mix follows what fills the etcd of a real cluster: pods whose specs repeat
// their ReplicaSet's template but differ in names, UIDs, IPs and container
// IDs; events with formatted messages; leases; ConfigMaps of configuration
// text and dashboards; Secrets that are mostly high-entropy (service account
// tokens, TLS keys, Helm releases, which Helm stores gzipped and base64
// encoded); EndpointSlices; and a few large custom resource definitions
// whose OpenAPI schemas repeat themselves. etcdtest.Fill's JSON values
// compress far better than that (about 9x), because nearly every byte of
// them is template text.

// kindWeights is how often each kind is written, by count. Together with
// the sizes the kinds' generators produce it sets the mix by bytes.
var kindWeights = []struct {
	kind   string
	weight int
}{
	{"pods", 280},
	{"events", 270},
	{"leases", 50},
	{"replicasets", 80},
	{"deployments", 30},
	{"configmaps", 90},
	{"secrets", 100},
	{"endpointslices", 60},
	{"services", 30},
	{"customresourcedefinitions", 3},
}

// gen writes Kubernetes-like objects; it is deterministic for a seed.
type gen struct {
	rnd        *rand.Rand
	n          int // objects written, for unique names
	totalW     int
	namespaces []string
	nodes      []node
	apps       []app
	caPEM      string
}

type node struct {
	name, ip string
}

type app struct {
	name, namespace string
	image           string
	labels          [][2]string
	annotations     [][2]string
	env             [][2]string
	args            []string
	ports           []int
	cpu, mem        string
	replicas        int
	hash            string // pod-template-hash
	uid             string // the Deployment's
	rsUID           string
}

var (
	nsWords    = []string{"default", "kube-system", "monitoring", "logging", "ingress", "cert-manager", "payments", "checkout", "search", "analytics", "platform", "identity", "billing", "catalog", "orders", "ml", "data", "edge", "team", "staging"}
	appWords   = []string{"api", "web", "worker", "gateway", "cache", "db", "queue", "scheduler", "auth", "cart", "search", "indexer", "exporter", "proxy", "frontend", "backend", "sync", "notifier", "ledger", "report"}
	registries = []string{"registry.k8s.io", "quay.io", "ghcr.io", "docker.io/library", "eu.gcr.io/acme-prod", "123456789012.dkr.ecr.eu-west-1.amazonaws.com"}
	envKeys    = []string{"LOG_LEVEL", "HTTP_PORT", "GRPC_PORT", "DATABASE_URL", "REDIS_ADDR", "CACHE_TTL", "FEATURE_FLAGS", "OTEL_EXPORTER_OTLP_ENDPOINT", "GOMAXPROCS", "GOMEMLIMIT", "REGION", "POD_NAME", "POD_NAMESPACE", "JAVA_OPTS", "KAFKA_BROKERS", "S3_BUCKET", "SENTRY_DSN", "TZ", "WORKERS", "MAX_CONNECTIONS"}
	cfgWords   = []string{"timeout", "retries", "endpoint", "enabled", "interval", "buffer_size", "max_idle", "tls", "path", "level", "format", "upstream", "listen", "workers", "keepalive", "cache", "ttl", "threshold", "window", "rules"}
	reasons    = []struct{ reason, typ, format string }{
		{"Scheduled", "Normal", "Successfully assigned %s/%s to %s"},
		{"Pulling", "Normal", "Pulling image %q"},
		{"Pulled", "Normal", "Successfully pulled image %q in %dms (%dms including waiting). Image size: %d bytes."},
		{"Created", "Normal", "Created container: %s"},
		{"Started", "Normal", "Started container %s"},
		{"Unhealthy", "Warning", "Readiness probe failed: Get \"http://%s:%d/healthz\": dial tcp %s:%d: connect: connection refused"},
		{"BackOff", "Warning", "Back-off restarting failed container %s in pod %s_%s(%s)"},
		{"ScalingReplicaSet", "Normal", "Scaled up replica set %s to %d"},
		{"Killing", "Normal", "Stopping container %s"},
	}
	lowerAlnum = "bcdfghjklmnpqrstvwxz2456789" // what Kubernetes uses for generated name suffixes
)

func newGen(seed int64) *gen {
	g := &gen{rnd: rand.New(rand.NewPCG(uint64(seed), 0x6a09e667f3bcc908))}
	for _, kw := range kindWeights {
		g.totalW += kw.weight
	}
	for i := range 60 {
		g.namespaces = append(g.namespaces, fmt.Sprintf("%s-%d", nsWords[i%len(nsWords)], i/len(nsWords)))
	}
	for i := range 80 {
		g.nodes = append(g.nodes, node{name: fmt.Sprintf("ip-10-%d-%d-%d.eu-west-1.compute.internal", 16+i/60, g.rnd.IntN(256), g.rnd.IntN(256)), ip: g.ip("10.16")})
	}
	for i := range 400 {
		g.apps = append(g.apps, g.newApp(i))
	}
	g.caPEM = g.pem("CERTIFICATE", 780)
	return g
}

func (g *gen) newApp(i int) app {
	name := appWords[g.rnd.IntN(len(appWords))] + "-" + appWords[g.rnd.IntN(len(appWords))]
	if i >= len(appWords) {
		name += "-" + strconv.Itoa(i)
	}
	a := app{
		name:      name,
		namespace: g.namespaces[g.rnd.IntN(len(g.namespaces))],
		image:     fmt.Sprintf("%s/%s/%s:v%d.%d.%d@sha256:%s", registries[g.rnd.IntN(len(registries))], appWords[g.rnd.IntN(len(appWords))], name, 1+g.rnd.IntN(3), g.rnd.IntN(40), g.rnd.IntN(20), g.hex(32)),
		cpu:       fmt.Sprintf("%dm", 50*(1+g.rnd.IntN(20))),
		mem:       fmt.Sprintf("%dMi", 64*(1+g.rnd.IntN(32))),
		replicas:  1 + g.rnd.IntN(8),
		hash:      g.suffix(10),
		uid:       g.uid(),
		rsUID:     g.uid(),
	}
	a.labels = [][2]string{
		{"app.kubernetes.io/name", name},
		{"app.kubernetes.io/instance", name + "-" + a.namespace},
		{"app.kubernetes.io/component", appWords[g.rnd.IntN(len(appWords))]},
		{"app.kubernetes.io/part-of", a.namespace},
		{"app.kubernetes.io/managed-by", "Helm"},
		{"app.kubernetes.io/version", fmt.Sprintf("%d.%d.%d", 1+g.rnd.IntN(3), g.rnd.IntN(40), g.rnd.IntN(20))},
		{"helm.sh/chart", fmt.Sprintf("%s-%d.%d.%d", name, g.rnd.IntN(5), g.rnd.IntN(30), g.rnd.IntN(10))},
	}
	a.annotations = [][2]string{
		{"meta.helm.sh/release-name", name},
		{"meta.helm.sh/release-namespace", a.namespace},
		{"checksum/config", g.hex(32)},
		{"checksum/secret", g.hex(32)},
		{"prometheus.io/scrape", "true"},
		{"prometheus.io/port", strconv.Itoa(9000 + g.rnd.IntN(1000))},
	}
	for range 4 + g.rnd.IntN(14) {
		k := envKeys[g.rnd.IntN(len(envKeys))]
		var v string
		switch g.rnd.IntN(4) {
		case 0:
			v = strconv.Itoa(g.rnd.IntN(100000))
		case 1:
			v = fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", appWords[g.rnd.IntN(len(appWords))], g.namespaces[g.rnd.IntN(len(g.namespaces))], 80+g.rnd.IntN(9000))
		case 2:
			v = g.base64(12 + g.rnd.IntN(24))
		default:
			v = strings.ToLower(k) + "-" + cfgWords[g.rnd.IntN(len(cfgWords))]
		}
		a.env = append(a.env, [2]string{k, v})
	}
	for range g.rnd.IntN(6) {
		a.args = append(a.args, fmt.Sprintf("--%s-%s=%d", cfgWords[g.rnd.IntN(len(cfgWords))], cfgWords[g.rnd.IntN(len(cfgWords))], g.rnd.IntN(1000)))
	}
	for range 1 + g.rnd.IntN(3) {
		a.ports = append(a.ports, 1024+g.rnd.IntN(9000))
	}
	return a
}

// next returns the next key and value.
func (g *gen) next() (string, []byte) {
	g.n++
	w := g.rnd.IntN(g.totalW)
	kind := kindWeights[0].kind
	for _, kw := range kindWeights {
		if w < kw.weight {
			kind = kw.kind
			break
		}
		w -= kw.weight
	}
	a := &g.apps[g.rnd.IntN(len(g.apps))]
	switch kind {
	case "pods":
		return g.pod(a)
	case "events":
		return g.event(a)
	case "leases":
		return g.lease(a)
	case "replicasets":
		return g.replicaSet(a)
	case "deployments":
		return g.deployment(a)
	case "configmaps":
		return g.configMap(a)
	case "secrets":
		return g.secret(a)
	case "endpointslices":
		return g.endpointSlice(a)
	case "services":
		return g.service(a)
	default:
		return g.crd()
	}
}

// Random pieces.

func (g *gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := g.rnd.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
	return b
}

func (g *gen) hex(n int) string    { return hex.EncodeToString(g.bytes(n)) }
func (g *gen) base64(n int) string { return base64.StdEncoding.EncodeToString(g.bytes(n)) }

func (g *gen) uid() string {
	h := g.hex(16)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (g *gen) suffix(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = lowerAlnum[g.rnd.IntN(len(lowerAlnum))]
	}
	return string(b)
}

func (g *gen) ip(prefix string) string {
	return fmt.Sprintf("%s.%d.%d", prefix, g.rnd.IntN(256), 1+g.rnd.IntN(254))
}

func (g *gen) pem(typ string, n int) string {
	var b strings.Builder
	b.WriteString("-----BEGIN " + typ + "-----\n")
	s := g.base64(n)
	for len(s) > 64 {
		b.WriteString(s[:64] + "\n")
		s = s[64:]
	}
	b.WriteString(s + "\n-----END " + typ + "-----\n")
	return b.String()
}

// timestamp returns seconds since the epoch within the last ninety days of
// a fixed date, so the data does not depend on the clock.
func (g *gen) timestamp() uint64 { return 1_780_000_000 - uint64(g.rnd.IntN(90*86400)) }

func (g *gen) resourceVersion() string { return strconv.Itoa(1_000_000 + g.n*7 + g.rnd.IntN(7)) }

// Protobuf wire format, as much of it as the objects need.

type pb []byte

func (b pb) varint(v uint64) pb {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (b pb) uint(field int, v uint64) pb { return b.varint(uint64(field) << 3).varint(v) } // wire type 0

func (b pb) str(field int, s string) pb {
	b = b.varint(uint64(field)<<3 | 2).varint(uint64(len(s)))
	return append(b, s...)
}

func (b pb) msg(field int, m pb) pb {
	b = b.varint(uint64(field)<<3 | 2).varint(uint64(len(m)))
	return append(b, m...)
}

func (b pb) kv(field int, kvs [][2]string) pb {
	for _, e := range kvs {
		b = b.msg(field, pb(nil).str(1, e[0]).str(2, e[1]))
	}
	return b
}

func timeMsg(sec uint64) pb { return pb(nil).uint(1, sec) }

// envelope wraps a raw object as the apiserver stores it.
func envelope(apiVersion, kind string, raw pb) []byte {
	u := pb(nil).msg(1, pb(nil).str(1, apiVersion).str(2, kind)).msg(2, raw).str(3, "").str(4, "")
	return append([]byte("k8s\x00"), u...)
}

// meta builds an ObjectMeta.
func (g *gen) meta(name, namespace string, labels, annotations [][2]string, owner *[3]string, fields string, created uint64) pb {
	m := pb(nil).str(1, name)
	if namespace != "" {
		m = m.str(3, namespace)
	}
	m = m.str(5, g.uid()).str(6, g.resourceVersion()).uint(7, uint64(1+g.rnd.IntN(4))).msg(8, timeMsg(created))
	m = m.kv(11, labels).kv(12, annotations)
	if owner != nil {
		m = m.msg(13, pb(nil).str(5, owner[0]).str(1, owner[1]).str(3, owner[2]).str(4, g.uid()).uint(6, 1).uint(7, 1))
	}
	managers := []string{"helm", "kube-controller-manager", "kubelet", "kube-scheduler", "argocd-controller"}
	for range 1 + g.rnd.IntN(3) {
		mf := pb(nil).str(1, managers[g.rnd.IntN(len(managers))]).str(2, "Update").str(3, "v1").
			msg(4, timeMsg(created+uint64(g.rnd.IntN(3600)))).str(6, "FieldsV1").msg(7, pb(nil).str(1, fields))
		if g.rnd.IntN(2) == 0 {
			mf = mf.str(8, "status")
		}
		m = m.msg(17, mf)
	}
	return m
}

// fieldsV1 renders managed fields the way the apiserver tracks them.
func fieldsV1(a *app) string {
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:annotations":{".":{}`)
	for _, kv := range a.annotations {
		fmt.Fprintf(&b, `,"f:%s":{}`, kv[0])
	}
	b.WriteString(`},"f:labels":{".":{}`)
	for _, kv := range a.labels {
		fmt.Fprintf(&b, `,"f:%s":{}`, kv[0])
	}
	fmt.Fprintf(&b, `}},"f:spec":{"f:containers":{"k:{\"name\":\"%s\"}":{".":{},"f:env":{".":{}`, a.name)
	for _, kv := range a.env {
		fmt.Fprintf(&b, `,"k:{\"name\":\"%s\"}":{".":{},"f:name":{},"f:value":{}}`, kv[0])
	}
	b.WriteString(`},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{}`)
	for _, p := range a.ports {
		fmt.Fprintf(&b, `,"k:{\"containerPort\":%d,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}`, p)
	}
	b.WriteString(`},"f:resources":{".":{},"f:limits":{".":{},"f:cpu":{},"f:memory":{}},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:serviceAccountName":{},"f:terminationGracePeriodSeconds":{}}}`)
	return b.String()
}

// container builds a Container of a's template.
func (g *gen) container(a *app) pb {
	c := pb(nil).str(1, a.name).str(2, a.image)
	for _, arg := range a.args {
		c = c.str(4, arg)
	}
	for i, p := range a.ports {
		c = c.msg(6, pb(nil).str(1, fmt.Sprintf("port-%d", i)).uint(3, uint64(p)).str(4, "TCP"))
	}
	for _, e := range a.env {
		c = c.msg(7, pb(nil).str(1, e[0]).str(2, e[1]))
	}
	q := func(cpu, mem string) pb { return pb(nil).kv(1, [][2]string{{"cpu", cpu}, {"memory", mem}}) }
	c = c.msg(8, pb(nil).msg(1, q(a.cpu, a.mem)).msg(2, q(a.cpu, a.mem)))
	c = c.msg(9, pb(nil).str(1, "kube-api-access").uint(2, 1).str(3, "/var/run/secrets/kubernetes.io/serviceaccount"))
	probe := pb(nil).msg(1, pb(nil).msg(2, pb(nil).str(1, "/healthz").msg(2, pb(nil).uint(1, 0).uint(2, uint64(a.ports[0]))).str(4, "HTTP"))).uint(2, 5).uint(3, 1).uint(4, 10).uint(5, 1).uint(6, 3)
	c = c.msg(10, probe).msg(11, probe)
	return c.str(13, "/dev/termination-log").str(14, "IfNotPresent").str(15, "File")
}

func (g *gen) podSpec(a *app, nodeName string) pb {
	s := pb(nil)
	s = s.msg(1, pb(nil).str(1, "kube-api-access").msg(2, pb(nil).msg(26, pb(nil).msg(1, pb(nil).msg(4, pb(nil).str(2, "token").uint(3, 3607).str(1, "")).msg(2, pb(nil).msg(1, pb(nil).str(1, "kube-root-ca.crt")).msg(2, pb(nil).str(1, "ca.crt").str(2, "ca.crt")))).uint(2, 420))))
	s = s.msg(2, g.container(a))
	s = s.str(3, "Always").uint(4, 30).str(6, "ClusterFirst").str(8, a.name).str(10, nodeName).msg(14, pb(nil)).str(19, "default-scheduler")
	for _, t := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
		s = s.msg(22, pb(nil).str(1, t).str(2, "Exists").str(4, "NoExecute").uint(5, 300))
	}
	return s.uint(24, 0).str(35, "PreemptLowerPriority").uint(30, 1)
}

func (g *gen) pod(a *app) (string, []byte) {
	name := a.name + "-" + a.hash + "-" + g.suffix(5)
	nd := g.nodes[g.rnd.IntN(len(g.nodes))]
	created := g.timestamp()
	labels := append([][2]string{{"pod-template-hash", a.hash}}, a.labels...)
	m := g.meta(name, a.namespace, labels, a.annotations, &[3]string{"apps/v1", "ReplicaSet", a.name + "-" + a.hash}, fieldsV1(a), created)
	podIP := g.ip("10.244")
	st := pb(nil).str(1, "Running")
	for _, c := range []string{"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"} {
		st = st.msg(2, pb(nil).str(1, c).str(2, "True").msg(3, timeMsg(created)).msg(4, timeMsg(created+uint64(g.rnd.IntN(60)))))
	}
	st = st.str(5, nd.ip).str(6, podIP).msg(7, timeMsg(created))
	cs := pb(nil).str(1, a.name).msg(2, pb(nil).msg(2, pb(nil).msg(1, timeMsg(created+3)))).msg(3, pb(nil)).uint(4, 1).uint(5, uint64(g.rnd.IntN(3))).
		str(6, a.image).str(7, a.image[:strings.IndexByte(a.image, '@')]+"@sha256:"+g.hex(32)).str(8, "containerd://"+g.hex(32)).uint(9, 1)
	st = st.msg(8, cs).str(9, "Burstable").msg(12, pb(nil).str(1, podIP))
	raw := pb(nil).msg(1, m).msg(2, g.podSpec(a, nd.name)).msg(3, st)
	return "/registry/pods/" + a.namespace + "/" + name, envelope("v1", "Pod", raw)
}

func (g *gen) replicaSet(a *app) (string, []byte) {
	name := a.name + "-" + g.suffix(10)
	created := g.timestamp()
	m := g.meta(name, a.namespace, a.labels, append([][2]string{{"deployment.kubernetes.io/desired-replicas", strconv.Itoa(a.replicas)}, {"deployment.kubernetes.io/max-replicas", strconv.Itoa(a.replicas + 1)}, {"deployment.kubernetes.io/revision", strconv.Itoa(1 + g.rnd.IntN(30))}}, a.annotations...), &[3]string{"apps/v1", "Deployment", a.name}, fieldsV1(a), created)
	tmpl := pb(nil).msg(1, pb(nil).kv(11, a.labels).kv(12, a.annotations)).msg(2, g.podSpec(a, ""))
	spec := pb(nil).uint(1, uint64(a.replicas)).msg(2, pb(nil).kv(1, a.labels[:2])).msg(3, tmpl)
	status := pb(nil).uint(1, uint64(a.replicas)).uint(2, uint64(a.replicas)).uint(3, uint64(g.rnd.IntN(5))).uint(4, uint64(a.replicas))
	return "/registry/replicasets/" + a.namespace + "/" + name, envelope("apps/v1", "ReplicaSet", pb(nil).msg(1, m).msg(2, spec).msg(3, status))
}

func (g *gen) deployment(a *app) (string, []byte) {
	name := a.name + "-" + g.suffix(4)
	created := g.timestamp()
	m := g.meta(name, a.namespace, a.labels, append([][2]string{{"deployment.kubernetes.io/revision", strconv.Itoa(1 + g.rnd.IntN(30))}}, a.annotations...), nil, fieldsV1(a), created)
	tmpl := pb(nil).msg(1, pb(nil).kv(11, a.labels).kv(12, a.annotations)).msg(2, g.podSpec(a, ""))
	spec := pb(nil).uint(1, uint64(a.replicas)).msg(2, pb(nil).kv(1, a.labels[:2])).msg(3, tmpl).msg(4, pb(nil).str(1, "RollingUpdate")).uint(6, 10)
	status := pb(nil).uint(1, uint64(a.replicas)).uint(2, uint64(a.replicas))
	for _, c := range [][2]string{{"Available", "MinimumReplicasAvailable"}, {"Progressing", "NewReplicaSetAvailable"}} {
		status = status.msg(6, pb(nil).str(1, c[0]).str(2, "True").msg(6, timeMsg(created)).msg(7, timeMsg(created)).str(4, c[1]).str(5, "Deployment has minimum availability."))
	}
	return "/registry/deployments/" + a.namespace + "/" + name, envelope("apps/v1", "Deployment", pb(nil).msg(1, m).msg(2, spec).msg(3, status))
}

func (g *gen) event(a *app) (string, []byte) {
	pod := a.name + "-" + a.hash + "-" + g.suffix(5)
	nd := g.nodes[g.rnd.IntN(len(g.nodes))]
	r := reasons[g.rnd.IntN(len(reasons))]
	var msg string
	switch r.reason {
	case "Scheduled":
		msg = fmt.Sprintf(r.format, a.namespace, pod, nd.name)
	case "Pulling":
		msg = fmt.Sprintf(r.format, a.image)
	case "Pulled":
		ms := g.rnd.IntN(20000)
		msg = fmt.Sprintf(r.format, a.image, ms, ms+g.rnd.IntN(5000), 10_000_000+g.rnd.IntN(500_000_000))
	case "Unhealthy":
		ip := g.ip("10.244")
		msg = fmt.Sprintf(r.format, ip, a.ports[0], ip, a.ports[0])
	case "BackOff":
		msg = fmt.Sprintf(r.format, a.name, pod, a.namespace, g.uid())
	case "ScalingReplicaSet":
		msg = fmt.Sprintf(r.format, a.name+"-"+a.hash, a.replicas)
	default:
		msg = fmt.Sprintf(r.format, a.name)
	}
	name := pod + "." + fmt.Sprintf("%x", g.rnd.Uint64()>>8)
	created := g.timestamp()
	m := pb(nil).str(1, name).str(3, a.namespace).str(5, g.uid()).str(6, g.resourceVersion()).msg(8, timeMsg(created))
	m = m.msg(17, pb(nil).str(1, "kubelet").str(2, "Update").str(3, "v1").msg(4, timeMsg(created)).str(6, "FieldsV1").msg(7, pb(nil).str(1, `{"f:count":{},"f:firstTimestamp":{},"f:involvedObject":{},"f:lastTimestamp":{},"f:message":{},"f:reason":{},"f:reportingComponent":{},"f:reportingInstance":{},"f:source":{"f:component":{},"f:host":{}},"f:type":{}}`)))
	obj := pb(nil).str(1, "Pod").str(2, a.namespace).str(3, pod).str(4, g.uid()).str(5, "v1").str(6, g.resourceVersion()).str(7, "spec.containers{"+a.name+"}")
	raw := pb(nil).msg(1, m).msg(2, obj).str(3, r.reason).str(4, msg).msg(5, pb(nil).str(1, "kubelet").str(2, nd.name)).
		msg(6, timeMsg(created)).msg(7, timeMsg(created+uint64(g.rnd.IntN(600)))).uint(8, uint64(1+g.rnd.IntN(20))).str(9, r.typ).
		msg(10, pb(nil)).str(12, "kubelet").str(13, nd.name)
	return "/registry/events/" + a.namespace + "/" + name, envelope("v1", "Event", raw)
}

func (g *gen) lease(a *app) (string, []byte) {
	// Leader-election leases only: node leases are one per node, too few
	// to matter in a large etcd.
	name, ns, holder := a.name+"-leader-"+g.suffix(6), a.namespace, a.name+"-"+a.hash+"-"+g.suffix(5)+"_"+g.uid()
	created := g.timestamp()
	m := pb(nil).str(1, name).str(3, ns).str(5, g.uid()).str(6, g.resourceVersion()).msg(8, timeMsg(created))
	spec := pb(nil).str(1, holder).uint(2, 40).msg(3, pb(nil).uint(1, created).uint(2, uint64(g.rnd.IntN(1e9)))).msg(4, pb(nil).uint(1, created+uint64(g.rnd.IntN(3600))).uint(2, uint64(g.rnd.IntN(1e9)))).uint(5, uint64(g.rnd.IntN(50)))
	return "/registry/leases/" + ns + "/" + name, envelope("coordination.k8s.io/v1", "Lease", pb(nil).msg(1, m).msg(2, spec))
}

func (g *gen) configMap(a *app) (string, []byte) {
	created := g.timestamp()
	var data [][2]string
	name := a.name + "-config-" + g.suffix(4)
	switch g.rnd.IntN(6) {
	case 0:
		name = "kube-root-ca.crt-" + g.suffix(4)
		data = [][2]string{{"ca.crt", g.caPEM}}
	case 1:
		name = a.name + "-dashboard-" + g.suffix(4)
		data = [][2]string{{a.name + ".json", g.dashboard(a)}}
	default:
		data = [][2]string{{"config.yaml", g.configText(a, 20+g.rnd.IntN(200))}}
		if g.rnd.IntN(3) == 0 {
			data = append(data, [2]string{"extra.properties", g.configText(a, 10+g.rnd.IntN(40))})
		}
	}
	m := g.meta(name, a.namespace, a.labels, a.annotations[:2], nil, `{"f:data":{".":{},"f:config.yaml":{}},"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/name":{}}}}`, created)
	return "/registry/configmaps/" + a.namespace + "/" + name, envelope("v1", "ConfigMap", pb(nil).msg(1, m).kv(2, data))
}

// configText writes lines of YAML-like configuration: a shared vocabulary
// with values that differ from object to object.
func (g *gen) configText(a *app, lines int) string {
	var b strings.Builder
	indent := ""
	for i := range lines {
		w := cfgWords[g.rnd.IntN(len(cfgWords))]
		switch g.rnd.IntN(8) {
		case 0:
			fmt.Fprintf(&b, "%s%s:\n", indent, w)
			indent = "  "
			continue
		case 1:
			fmt.Fprintf(&b, "%s%s: %q\n", indent, w, g.base64(6+g.rnd.IntN(18)))
		case 2:
			fmt.Fprintf(&b, "%s%s: http://%s.%s.svc:%d/%s\n", indent, w, appWords[g.rnd.IntN(len(appWords))], g.namespaces[g.rnd.IntN(len(g.namespaces))], 80+g.rnd.IntN(9000), cfgWords[g.rnd.IntN(len(cfgWords))])
		case 3:
			fmt.Fprintf(&b, "%s%s: %t\n", indent, w, g.rnd.IntN(2) == 0)
		default:
			fmt.Fprintf(&b, "%s%s_%d: %d%s\n", indent, w, i, g.rnd.IntN(100000), []string{"", "s", "ms", "Mi", ""}[g.rnd.IntN(5)])
		}
		if g.rnd.IntN(6) == 0 {
			indent = ""
		}
	}
	return b.String()
}

// dashboard writes a Grafana-like JSON dashboard: large and repetitive.
func (g *gen) dashboard(a *app) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"title":"%s","uid":"%s","schemaVersion":39,"panels":[`, a.name, g.suffix(9))
	for i := range 5 + g.rnd.IntN(25) {
		if i > 0 {
			b.WriteByte(',')
		}
		metric := cfgWords[g.rnd.IntN(len(cfgWords))] + "_" + cfgWords[g.rnd.IntN(len(cfgWords))] + "_total"
		fmt.Fprintf(&b, `{"id":%d,"type":"timeseries","title":"%s %s","gridPos":{"h":8,"w":12,"x":%d,"y":%d},"datasource":{"type":"prometheus","uid":"prometheus"},"targets":[{"expr":"sum(rate(%s{namespace=\"%s\",app=\"%s\"}[5m])) by (pod)","legendFormat":"{{pod}}","refId":"A"}],"fieldConfig":{"defaults":{"unit":"short","min":0},"overrides":[]}}`,
			i+1, a.name, metric, 12*(i%2), 8*(i/2), metric, a.namespace, a.name)
	}
	b.WriteString(`]}`)
	return b.String()
}

func (g *gen) secret(a *app) (string, []byte) {
	created := g.timestamp()
	var name, typ string
	var data [][2]string
	switch r := g.rnd.IntN(10); {
	case r < 3: // a Helm release: gzip, base64 encoded by Helm, so nearly incompressible
		name = fmt.Sprintf("sh.helm.release.v1.%s.v%d", a.name, 1+g.rnd.IntN(10))
		typ = "helm.sh/release.v1"
		data = [][2]string{{"release", g.base64(6000 + g.rnd.IntN(30000))}}
	case r < 6: // a TLS certificate and key
		name = a.name + "-tls-" + g.suffix(4)
		typ = "kubernetes.io/tls"
		data = [][2]string{{"ca.crt", g.caPEM}, {"tls.crt", g.pem("CERTIFICATE", 900+g.rnd.IntN(400))}, {"tls.key", g.pem("RSA PRIVATE KEY", 1190)}}
	case r < 8: // a service account token
		name = a.name + "-token-" + g.suffix(5)
		typ = "kubernetes.io/service-account-token"
		claims := fmt.Sprintf(`{"iss":"kubernetes/serviceaccount","kubernetes.io/serviceaccount/namespace":"%s","kubernetes.io/serviceaccount/secret.name":"%s","kubernetes.io/serviceaccount/service-account.name":"%s","kubernetes.io/serviceaccount/service-account.uid":"%s","sub":"system:serviceaccount:%s:%s"}`, a.namespace, name, a.name, g.uid(), a.namespace, a.name)
		jwt := "eyJhbGciOiJSUzI1NiIsImtpZCI6I" + g.suffix(40) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + "." + base64.RawURLEncoding.EncodeToString(g.bytes(256))
		data = [][2]string{{"ca.crt", g.caPEM}, {"namespace", a.namespace}, {"token", jwt}}
	default: // application credentials
		name = a.name + "-credentials-" + g.suffix(4)
		typ = "Opaque"
		for _, k := range []string{"username", "password", "api-key", "database-url"} {
			data = append(data, [2]string{k, g.base64(16 + g.rnd.IntN(48))})
		}
	}
	m := g.meta(name, a.namespace, a.labels[:3], nil, nil, `{"f:data":{".":{}},"f:type":{}}`, created)
	return "/registry/secrets/" + a.namespace + "/" + name, envelope("v1", "Secret", pb(nil).msg(1, m).kv(2, data).str(3, typ))
}

func (g *gen) endpointSlice(a *app) (string, []byte) {
	name := a.name + "-" + g.suffix(5)
	created := g.timestamp()
	m := g.meta(name, a.namespace, append([][2]string{{"kubernetes.io/service-name", a.name}, {"endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io"}}, a.labels[:2]...), [][2]string{{"endpoints.kubernetes.io/last-change-trigger-time", "2026-05-01T10:00:00Z"}}, &[3]string{"v1", "Service", a.name}, `{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:labels":{".":{}},"f:ownerReferences":{}},"f:ports":{}}`, created)
	raw := pb(nil).msg(1, m).str(4, "IPv4")
	for range a.replicas {
		nd := g.nodes[g.rnd.IntN(len(g.nodes))]
		ep := pb(nil).str(1, g.ip("10.244")).msg(2, pb(nil).uint(1, 1).uint(2, 1).uint(3, 0)).msg(4, pb(nil).str(1, "Pod").str(2, a.namespace).str(3, a.name+"-"+a.hash+"-"+g.suffix(5)).str(4, g.uid())).str(6, nd.name).str(7, "eu-west-1"+string(rune('a'+g.rnd.IntN(3))))
		raw = raw.msg(2, ep)
	}
	for i, p := range a.ports {
		raw = raw.msg(3, pb(nil).str(1, fmt.Sprintf("port-%d", i)).str(2, "TCP").uint(3, uint64(p)))
	}
	return "/registry/endpointslices/" + a.namespace + "/" + name, envelope("discovery.k8s.io/v1", "EndpointSlice", raw)
}

func (g *gen) service(a *app) (string, []byte) {
	name := a.name + "-" + g.suffix(3)
	created := g.timestamp()
	m := g.meta(name, a.namespace, a.labels, a.annotations[:2], nil, `{"f:metadata":{"f:annotations":{".":{}},"f:labels":{".":{}}},"f:spec":{"f:ports":{},"f:selector":{},"f:type":{}}}`, created)
	spec := pb(nil)
	for i, p := range a.ports {
		spec = spec.msg(1, pb(nil).str(1, fmt.Sprintf("port-%d", i)).str(2, "TCP").uint(3, uint64(p)).msg(4, pb(nil).uint(2, uint64(p))))
	}
	ip := g.ip("10.96")
	spec = spec.kv(2, a.labels[:2]).str(3, ip).str(4, "ClusterIP").str(7, "None").str(20, ip).str(21, "IPv4").str(22, "SingleStack")
	return "/registry/services/specs/" + a.namespace + "/" + name, envelope("v1", "Service", pb(nil).msg(1, m).msg(2, spec).msg(3, pb(nil)))
}

// crd writes a CustomResourceDefinition with a generated OpenAPI schema:
// few objects, each large, mostly repeated structure.
func (g *gen) crd() (string, []byte) {
	group := fmt.Sprintf("%s.%s.io", appWords[g.rnd.IntN(len(appWords))], nsWords[g.rnd.IntN(len(nsWords))])
	kind := strings.ToUpper(cfgWords[g.rnd.IntN(len(cfgWords))][:1]) + cfgWords[g.rnd.IntN(len(cfgWords))] + strconv.Itoa(g.n)
	plural := strings.ToLower(kind) + "s"
	var b strings.Builder
	var props func(depth int)
	props = func(depth int) {
		b.WriteString(`{"type":"object","properties":{`)
		for i := range 3 + g.rnd.IntN(8) {
			if i > 0 {
				b.WriteByte(',')
			}
			f := cfgWords[g.rnd.IntN(len(cfgWords))] + strings.ToUpper(cfgWords[g.rnd.IntN(len(cfgWords))][:1]) + strconv.Itoa(i)
			fmt.Fprintf(&b, `%q:`, f)
			if depth < 2 && g.rnd.IntN(4) == 0 {
				props(depth + 1)
				continue
			}
			fmt.Fprintf(&b, `{"type":%q,"description":"%s configures the %s of the %s. It defaults to %d when unset; see the %s documentation."}`,
				[]string{"string", "integer", "boolean"}[g.rnd.IntN(3)], f, cfgWords[g.rnd.IntN(len(cfgWords))], kind, g.rnd.IntN(1000), group)
		}
		b.WriteString(`}}`)
	}
	for range 2 + g.rnd.IntN(5) {
		props(0)
	}
	name := plural + "." + group
	created := g.timestamp()
	m := g.meta(name, "", nil, [][2]string{{"controller-gen.kubebuilder.io/version", "v0.16.5"}}, nil, `{"f:spec":{"f:group":{},"f:names":{},"f:scope":{},"f:versions":{}}}`, created)
	spec := pb(nil).str(1, group).msg(3, pb(nil).str(1, plural).str(2, strings.ToLower(kind)).str(4, kind).str(5, kind+"List")).str(4, "Namespaced").
		msg(7, pb(nil).str(1, "v1").uint(2, 1).uint(3, 1).msg(4, pb(nil).msg(1, pb(nil).str(1, b.String()))))
	return "/registry/apiextensions.k8s.io/customresourcedefinitions/" + name, envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition", pb(nil).msg(1, m).msg(2, spec))
}
