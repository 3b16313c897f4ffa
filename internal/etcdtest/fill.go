package etcdtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// FillOptions describes the data Fill writes.
type FillOptions struct {
	// Keys is the number of keys to write.
	Keys int
	// Prefix starts every key. Empty means "/registry", as in Kubernetes.
	Prefix string
	// ValueSize is the size of each value in bytes. A value is never
	// smaller than its object without padding (0.9 to 3 KiB by kind).
	// Zero means 2048.
	ValueSize int
	// Seed makes the data: the same options write the same keys and values.
	Seed int64
}

// FillResult reports what Fill wrote.
type FillResult struct {
	Keys       int
	KeyBytes   int64
	ValueBytes int64
	// Revision is the cluster's revision after the last write.
	Revision int64
	// Txns is the number of transactions used.
	Txns int
}

// Bytes returns the bytes written, keys and values.
func (r FillResult) Bytes() int64 { return r.KeyBytes + r.ValueBytes }

// Batch limits: etcd refuses a transaction of more than 128 operations
// (--max-txn-ops) or a request of more than 1.5 MiB (--max-request-bytes).
const (
	fillBatchOps   = 100
	fillBatchBytes = 1 << 20
)

// Fill writes opts.Keys keys shaped like a Kubernetes cluster's: JSON
// objects (Pods, ConfigMaps, Secrets, Deployments, Services) with metadata,
// labels, annotations and managed fields, specs of repeated structure, and a
// share of random hex and base64 content, so that the data compresses about
// as real cluster data does (3-5x with zstd) instead of to nothing. Values
// are padded to about opts.ValueSize. Writes are batched in transactions.
func Fill(ctx context.Context, cli *clientv3.Client, opts FillOptions) (FillResult, error) {
	if opts.Keys < 0 || opts.ValueSize < 0 {
		return FillResult{}, errors.New("fill: negative keys or value size")
	}
	if opts.Prefix == "" {
		opts.Prefix = "/registry"
	}
	if opts.ValueSize == 0 {
		opts.ValueSize = 2048
	}
	g := newObjectGen(opts.Seed)
	var res FillResult
	var ops []clientv3.Op
	batchBytes := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("fill: write batch ending at key %d: %w", res.Keys, err)
		}
		res.Revision = resp.Header.Revision
		res.Txns++
		ops, batchBytes = ops[:0], 0
		return nil
	}
	for i := range opts.Keys {
		key, value := g.object(opts.Prefix, i, opts.ValueSize)
		if len(ops) > 0 && (len(ops) == fillBatchOps || batchBytes+len(key)+len(value) > fillBatchBytes) {
			if err := flush(); err != nil {
				return res, err
			}
		}
		ops = append(ops, clientv3.OpPut(key, string(value)))
		batchBytes += len(key) + len(value)
		res.Keys++
		res.KeyBytes += int64(len(key))
		res.ValueBytes += int64(len(value))
	}
	if err := flush(); err != nil {
		// the keys of the failed batch were counted but not written
		return res, err
	}
	return res, nil
}

// FillKey returns the key Fill writes as its i-th (from 0) under prefix,
// whatever the seed, so tests can look values up.
func FillKey(prefix string, i int) string {
	if prefix == "" {
		prefix = "/registry"
	}
	return fillKey(prefix, i)
}

type objectGen struct {
	rnd *rand.Rand
}

func newObjectGen(seed int64) *objectGen {
	return &objectGen{rnd: rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))}
}

var (
	kinds      = []struct{ resource, apiVersion, kind string }{{"pods", "v1", "Pod"}, {"configmaps", "v1", "ConfigMap"}, {"secrets", "v1", "Secret"}, {"deployments", "apps/v1", "Deployment"}, {"services", "v1", "Service"}}
	namespaces = []string{"default", "kube-system", "monitoring", "ingress-nginx", "cert-manager", "payments", "checkout", "search", "analytics", "team-a", "team-b"}
	apps       = []string{"api", "web", "worker", "redis", "postgres", "nginx", "prometheus", "grafana", "fluent-bit", "coredns", "kafka", "cart", "auth"}
	tiers      = []string{"frontend", "backend", "cache", "database", "observability"}
	managers   = []string{"kube-controller-manager", "kubectl-client-side-apply", "helm", "kubelet", "argocd-controller"}
	envNames   = []string{"LOG_LEVEL", "HTTP_PORT", "DATABASE_URL", "CACHE_TTL", "FEATURE_FLAGS", "OTEL_EXPORTER_OTLP_ENDPOINT", "GOMAXPROCS", "REGION", "POD_NAME", "POD_NAMESPACE"}
	words      = []string{"replicas", "selector", "matchLabels", "template", "containers", "resources", "requests", "limits", "memory", "cpu", "readinessProbe", "httpGet", "path", "healthz", "port", "periodSeconds", "volumeMounts", "mountPath", "serviceAccountName", "tolerations", "effect", "NoSchedule"}
	baseTime   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

type object struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   metadata       `json:"metadata"`
	Spec       *spec          `json:"spec,omitempty"`
	Data       map[string]any `json:"data,omitempty"`
	Status     map[string]any `json:"status,omitempty"`
}

type metadata struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               string            `json:"uid"`
	ResourceVersion   string            `json:"resourceVersion"`
	Generation        int               `json:"generation"`
	CreationTimestamp string            `json:"creationTimestamp"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	ManagedFields     []managedField    `json:"managedFields"`
}

type managedField struct {
	Manager    string         `json:"manager"`
	Operation  string         `json:"operation"`
	APIVersion string         `json:"apiVersion"`
	Time       string         `json:"time"`
	FieldsType string         `json:"fieldsType"`
	FieldsV1   map[string]any `json:"fieldsV1"`
}

type spec struct {
	Replicas           int         `json:"replicas,omitempty"`
	ServiceAccountName string      `json:"serviceAccountName"`
	Containers         []container `json:"containers"`
}

type container struct {
	Name      string              `json:"name"`
	Image     string              `json:"image"`
	Env       []map[string]string `json:"env"`
	Ports     []map[string]any    `json:"ports"`
	Resources map[string]any      `json:"resources"`
}

func (g *objectGen) pick(list []string) string { return list[g.rnd.IntN(len(list))] }

func (g *objectGen) hex(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rnd.Uint32())
	}
	return hex.EncodeToString(b)
}

func (g *objectGen) uid() string {
	h := g.hex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func fillKey(prefix string, i int) string {
	k := kinds[i%len(kinds)]
	ns := namespaces[i%len(namespaces)]
	return fmt.Sprintf("%s/%s/%s/%s-%s-%06d", strings.TrimSuffix(prefix, "/"), k.resource, ns, apps[i%len(apps)], k.resource[:3], i)
}

// object returns the i-th key and its value, padded to about size bytes.
func (g *objectGen) object(prefix string, i, size int) (string, []byte) {
	k := kinds[i%len(kinds)]
	app := apps[i%len(apps)]
	key := fillKey(prefix, i)
	name := key[strings.LastIndexByte(key, '/')+1:]
	created := baseTime.Add(time.Duration(i) * time.Second).Format(time.RFC3339)

	o := object{
		APIVersion: k.apiVersion,
		Kind:       k.kind,
		Metadata: metadata{
			Name:              name,
			Namespace:         namespaces[i%len(namespaces)],
			UID:               g.uid(),
			ResourceVersion:   fmt.Sprint(1000 + i),
			Generation:        1 + g.rnd.IntN(5),
			CreationTimestamp: created,
			Labels: map[string]string{
				"app.kubernetes.io/name":       app,
				"app.kubernetes.io/component":  g.pick(tiers),
				"app.kubernetes.io/managed-by": "Helm",
				"app.kubernetes.io/version":    fmt.Sprintf("1.%d.%d", g.rnd.IntN(30), g.rnd.IntN(10)),
				"pod-template-hash":            g.hex(5),
			},
			Annotations: map[string]string{
				"checksum/config":                   g.hex(32),
				"meta.helm.sh/release-name":         app,
				"meta.helm.sh/release-namespace":    namespaces[i%len(namespaces)],
				"deployment.kubernetes.io/revision": fmt.Sprint(1 + g.rnd.IntN(20)),
			},
		},
	}
	for range 1 + g.rnd.IntN(2) {
		o.Metadata.ManagedFields = append(o.Metadata.ManagedFields, managedField{
			Manager:    g.pick(managers),
			Operation:  "Update",
			APIVersion: k.apiVersion,
			Time:       created,
			FieldsType: "FieldsV1",
			FieldsV1: map[string]any{
				"f:metadata": map[string]any{"f:labels": map[string]any{".": map[string]any{}, "f:app.kubernetes.io/name": map[string]any{}}},
				"f:spec":     map[string]any{"f:" + g.pick(words): map[string]any{}, "f:" + g.pick(words): map[string]any{}},
			},
		})
	}
	switch k.kind {
	case "ConfigMap", "Secret":
		o.Data = map[string]any{}
	default:
		s := &spec{ServiceAccountName: app, Replicas: 1 + g.rnd.IntN(5)}
		for c := range 1 + g.rnd.IntN(2) {
			ct := container{
				Name:  fmt.Sprintf("%s-%d", app, c),
				Image: fmt.Sprintf("registry.example.com/%s/%s:v1.%d.%d@sha256:%s", namespaces[i%len(namespaces)], app, g.rnd.IntN(30), g.rnd.IntN(10), g.hex(32)),
				Resources: map[string]any{
					"requests": map[string]string{"cpu": fmt.Sprintf("%dm", 50*(1+g.rnd.IntN(8))), "memory": fmt.Sprintf("%dMi", 64*(1+g.rnd.IntN(8)))},
					"limits":   map[string]string{"cpu": fmt.Sprintf("%dm", 500*(1+g.rnd.IntN(4))), "memory": fmt.Sprintf("%dMi", 256*(1+g.rnd.IntN(8)))},
				},
				Ports: []map[string]any{{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}},
			}
			for _, e := range envNames[:3+g.rnd.IntN(len(envNames)-3)] {
				ct.Env = append(ct.Env, map[string]string{"name": e, "value": fmt.Sprintf("%s-%d", strings.ToLower(e), g.rnd.IntN(100))})
			}
			s.Containers = append(s.Containers, ct)
		}
		o.Spec = s
		o.Status = map[string]any{"phase": "Running", "observedGeneration": o.Metadata.Generation, "conditions": []map[string]string{
			{"type": "Ready", "status": "True", "lastTransitionTime": created},
			{"type": "Available", "status": "True", "lastTransitionTime": created},
		}}
		o.Data = map[string]any{}
	}

	// Measure the object with empty padding, then pad to size. Padding is
	// four parts config-like text to one part base64 of random bytes, with
	// no character JSON escapes, so its length is exact.
	o.Data["padding"] = ""
	base, err := json.Marshal(o)
	if err != nil {
		panic(err) // the types above always marshal
	}
	if pad := size - len(base); pad > 0 {
		o.Data["padding"] = g.padding(pad)
	} else {
		delete(o.Data, "padding")
	}
	value, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return key, value
}

func (g *objectGen) padding(n int) string {
	var b bytes.Buffer
	b.Grow(n + 64)
	raw := make([]byte, 48)
	for b.Len() < n {
		if g.rnd.IntN(5) == 0 {
			for j := range raw {
				raw[j] = byte(g.rnd.Uint32())
			}
			b.WriteString(base64.StdEncoding.EncodeToString(raw))
		} else {
			fmt.Fprintf(&b, "%s: %s-%d; %s: %d; ", g.pick(words), g.pick(apps), g.rnd.IntN(50), g.pick(words), g.rnd.IntN(1000))
		}
	}
	return b.String()[:n]
}
