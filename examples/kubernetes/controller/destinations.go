package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Secret keys of a destination's credentials.
const (
	SecretAccessKey    = "accessKeyID"
	SecretSecretKey    = "secretAccessKey"
	SecretSessionToken = "sessionToken"
)

// errSecretNamespace refuses a destination whose credentials Secret is
// outside the controller's namespace.
var errSecretNamespace = errors.New("credentials secret outside the controller's namespace")

// errAmbientCredentials refuses a destination without a credentials
// Secret whose URL names an endpoint other than its cloud's own: the
// library would sign its requests with the controller's own credentials
// (the AWS_* or AZURE_* variables, the pod's cloud identity), and send
// them to a host the destination's author chose.
var errAmbientCredentials = errors.New("an endpoint other than the cloud's own needs credentialsSecretRef: the controller's own credentials are not sent to it")

// foreignEndpoint reports whether loc names an endpoint other than its
// cloud's own public one, on HTTPS: an Amazon S3 endpoint
// (s3.amazonaws.com, s3.REGION.amazonaws.com, s3.dualstack.REGION...,
// s3-REGION..., s3-fips..., and the same under amazonaws.com.cn),
// storage.googleapis.com, or an Azure blob domain (blob.core.windows.net,
// the government and China clouds', or one under them, as privatelink.):
// the client's host is ACCOUNT.DOMAIN, Microsoft's whatever the account.
// The check is by name, not by Location.Overlaps, which answers "may
// overlap" when it cannot tell.
func foreignEndpoint(loc destination.Location) bool {
	if loc.Endpoint == "" {
		return false
	}
	if loc.Insecure {
		return true
	}
	host := strings.ToLower(loc.Endpoint)
	if rest, ok := strings.CutPrefix(host, "https://"); ok {
		host = rest
	} else if strings.Contains(host, "://") {
		return true
	}
	host = strings.TrimSuffix(strings.TrimSuffix(host, ":443"), ".")
	switch loc.Scheme {
	case destination.SchemeS3:
		return !awsS3Host.MatchString(host)
	case destination.SchemeGCS:
		return host != "storage.googleapis.com"
	case destination.SchemeAzure:
		for _, domain := range azureBlobDomains {
			if host == domain || strings.HasSuffix(host, "."+domain) {
				return false
			}
		}
	}
	return true
}

// awsS3Host matches Amazon S3's own endpoints, in the commercial and
// GovCloud regions (amazonaws.com) and in China (amazonaws.com.cn).
var awsS3Host = regexp.MustCompile(`^s3(-fips)?([.-]dualstack)?([.-][a-z0-9-]+)?\.amazonaws\.com(\.cn)?$`)

// azureBlobDomains are the blob storage domains of Azure's public,
// government and China clouds.
var azureBlobDomains = []string{"blob.core.windows.net", "blob.core.usgovcloudapi.net", "blob.core.chinacloudapi.cn"}

// secretResolver reads a destination's keys from the Secret
// "namespace/name" through the Secrets cache, in its namespace only.
type secretResolver struct {
	client    client.Reader
	namespace string
}

func (s *secretResolver) ResolveSecret(ctx context.Context, _, ref string) (*credentials.Credentials, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return nil, fmt.Errorf("secret reference %q is not namespace/name", ref)
	}
	if ns != s.namespace {
		return nil, fmt.Errorf("%w %s: secret %s", errSecretNamespace, s.namespace, ref)
	}
	var sec corev1.Secret
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s not found", ref)
		}
		return nil, fmt.Errorf("secret %s: %w", ref, err)
	}
	keys := destination.Keys{
		AccessKey:    string(sec.Data[SecretAccessKey]),
		SecretKey:    string(sec.Data[SecretSecretKey]),
		SessionToken: string(sec.Data[SecretSessionToken]),
	}
	if keys.AccessKey == "" || keys.SecretKey == "" {
		return nil, fmt.Errorf("secret %s lacks %s or %s", ref, SecretAccessKey, SecretSecretKey)
	}
	return keys.Credentials(), nil
}

// destinations reconciles the registry to every BackupDestination at
// once, as Registry.Apply wants the whole set, and writes each object's
// status from the registry.
type destinations struct {
	client client.Client
	// secrets reads the credentials Secrets of the controller's
	// namespace, from a cache of their own.
	secrets  cache.Cache
	events   recorder
	registry *destination.Registry
	configs  *configs
	// changed carries the registry's events into the controller: a
	// destination's availability or inventory changed.
	changed chan event.GenericEvent
	// resync is how often the statuses are written even without an event,
	// so that lastSync follows syncs that found nothing new.
	resync time.Duration
	// namespace is the only one credentials Secrets are read from.
	namespace string
	// loaded opens after the first apply.
	loaded *gate
}

// registryKey is the one request the destinations controller handles.
var registryKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "registry"}}

func (d *destinations) setup(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{registryKey}
	})
	// One reconcile at the start, so that the destinations load, and the
	// gate opens, when there is no BackupDestination to watch yet.
	d.changed <- event.GenericEvent{Object: &v1alpha1.BackupDestination{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("backupdestination").
		Watches(&v1alpha1.BackupDestination{}, all).
		WatchesRawSource(source.Kind[client.Object](d.secrets, &corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(d.secretChanged))).
		WatchesRawSource(source.Channel(d.changed, all)).
		Complete(d)
}

// secretChanged enqueues the registry when a Secret a destination uses
// changes: the new resourceVersion becomes the credentials' revision, and
// Apply reopens the destination with the new keys.
func (d *destinations) secretChanged(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != d.namespace {
		return nil
	}
	var list v1alpha1.BackupDestinationList
	if err := d.client.List(ctx, &list, client.MatchingFields{indexSecret: o.GetNamespace() + "/" + o.GetName()}); err != nil || len(list.Items) == 0 {
		return nil
	}
	return []reconcile.Request{registryKey}
}

// observe turns the registry's events into Kubernetes Events and status
// updates.
func (d *destinations) observe(e destination.Event) {
	if e.Kind == destination.StatusChanged {
		obj := realObject(context.Background(), d.client, destinationObject(e.Destination))
		if e.Status.Available() {
			d.events.Eventf(obj, nil, corev1.EventTypeNormal, "Available", "Check", "destination is available")
		} else if e.Status.State == destination.StateUnavailable {
			d.events.Eventf(obj, nil, corev1.EventTypeWarning, "Unavailable", "Check", "%s: %s", e.Status.Reason, e.Status.Message)
		}
	}
	select {
	case d.changed <- event.GenericEvent{Object: &v1alpha1.BackupDestination{}}:
	default: // a reconcile is pending already; it reads the newest state
	}
}

func (d *destinations) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var list v1alpha1.BackupDestinationList
	if err := d.client.List(ctx, &list); err != nil {
		return reconcile.Result{}, err
	}
	// The default first, then by age: of two destinations that claim the
	// same location, the older keeps it.
	objs := slices.DeleteFunc(list.Items, func(o v1alpha1.BackupDestination) bool { return !o.DeletionTimestamp.IsZero() })
	slices.SortFunc(objs, func(a, b v1alpha1.BackupDestination) int {
		return cmp.Or(
			-cmp.Compare(boolInt(a.Name == v1alpha1.DefaultDestination), boolInt(b.Name == v1alpha1.DefaultDestination)),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Name, b.Name))
	})
	refused := map[string]error{}
	var desired destination.Desired
	var locs []struct {
		name string
		loc  destination.Location
	}
	for i := range objs {
		o := &objs[i]
		spec, err := d.spec(ctx, o)
		var loc destination.Location
		if err == nil {
			loc, err = spec.Location()
		}
		if err == nil {
			for _, l := range locs {
				if l.loc.Overlaps(loc) {
					err = fmt.Errorf("%w: %s is the location of destination %s", destination.ErrLocationInUse, loc, l.name)
					break
				}
			}
		}
		if err != nil {
			refused[o.Name] = err
			continue
		}
		locs = append(locs, struct {
			name string
			loc  destination.Location
		}{o.Name, loc})
		desired.Destinations = append(desired.Destinations, spec)
	}
	if len(objs) > 0 {
		// The default is default, sorted first when it exists; refused,
		// it stays what it was (see ApplyEach).
		desired.Default = objs[0].Name
	}
	// Each destination is judged alone: one the registry refuses leaves
	// the others, and their rotated credentials, applied.
	changes, applyRefused, applyErr := d.registry.ApplyEach(ctx, desired)
	if applyErr == nil {
		d.loaded.open()
		// The configs that name a changed destination are checked again
		// against the registry as it is now.
		d.configs.revalidate(ctx, slices.Concat(changes.Added, changes.Updated, changes.Removed))
	}
	var errs []error
	for i := range objs {
		o := &objs[i]
		err := cmp.Or(refused[o.Name], applyRefused[o.Name], applyErr)
		if err := d.writeStatus(ctx, o, err); err != nil {
			errs = append(errs, err)
		}
	}
	return reconcile.Result{RequeueAfter: d.resync}, errors.Join(append(errs, applyErr)...)
}

// spec maps an object onto the registry's spec. The Secret's
// resourceVersion is the credentials' revision: a rotated Secret reopens
// the destination with its new keys.
func (d *destinations) spec(ctx context.Context, o *v1alpha1.BackupDestination) (destination.Spec, error) {
	s := destination.Spec{Name: o.Name, URL: o.Spec.URL, ReadOnly: o.Spec.ReadOnly}
	if o.Spec.PollInterval != nil {
		s.PollInterval = o.Spec.PollInterval.Duration
	}
	if o.Spec.CheckInterval != nil {
		s.CheckInterval = o.Spec.CheckInterval.Duration
	}
	if l := o.Spec.ObjectLock; l != nil {
		s.ObjectLock = destination.ObjectLock{Mode: storage.RetentionMode(l.Mode), RetainFor: l.RetainFor.Duration}
	}
	ref := o.Spec.CredentialsSecretRef
	if loc, err := s.Location(); ref == nil && err == nil && foreignEndpoint(loc) {
		return s, errAmbientCredentials
	}
	if ref != nil {
		ns := cmp.Or(ref.Namespace, d.namespace)
		if ns != d.namespace {
			// Refused before anything reads it: whoever may write a
			// BackupDestination must not send another namespace's keys
			// to an endpoint of their choice.
			return s, fmt.Errorf("%w %s: secret %s/%s", errSecretNamespace, d.namespace, ns, ref.Name)
		}
		s.Credentials = destination.Credentials{Source: destination.SourceSecret, Secret: ns + "/" + ref.Name}
		var sec corev1.Secret
		err := d.secrets.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &sec)
		switch {
		case err == nil:
			s.Credentials.Revision = sec.ResourceVersion
		case !apierrors.IsNotFound(err):
			return s, err
		}
		// A missing Secret leaves the destination unavailable until it
		// appears; its checks say so.
	}
	return s, s.Validate()
}

// writeStatus sets an object's Accepted condition from refused, and its
// Available condition and inventory from the registry.
func (d *destinations) writeStatus(ctx context.Context, o *v1alpha1.BackupDestination, refused error) error {
	before := o.Status.DeepCopy()
	st := &o.Status
	st.ObservedGeneration = o.Generation
	if refused != nil {
		if meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse,
			Reason: refusalReason(refused), Message: refused.Error(), ObservedGeneration: o.Generation}) {
			d.events.Eventf(o, nil, corev1.EventTypeWarning, "Refused", "Apply", "%s", refused.Error())
		}
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionAvailable)
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue,
			Reason: "Applied", Message: "the destination is in the registry", ObservedGeneration: o.Generation})
		if dst, err := d.registry.Get(o.Name); err == nil {
			setAvailable(st, dst.Status(), o.Generation)
			inv := dst.Inventory()
			if !inv.Synced.IsZero() {
				t := metav1.NewTime(inv.Synced)
				st.LastSync = &t
			}
			st.Backups = int32(countBackups(inv))
		}
	}
	if equalStatus(before, st) {
		return nil
	}
	return client.IgnoreNotFound(d.client.Status().Update(ctx, o))
}

func setAvailable(st *v1alpha1.BackupDestinationStatus, s destination.Status, gen int64) {
	c := metav1.Condition{Type: v1alpha1.ConditionAvailable, ObservedGeneration: gen}
	switch s.State {
	case destination.StateAvailable:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "Available", "the last check reached the destination"
	case destination.StateUnavailable:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, camel(string(s.Reason)), s.Message
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, "NotChecked", "the destination was not checked yet"
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// countBackups counts the backups of an inventory: one manifest per backup.
func countBackups(inv destination.Inventory) int {
	n := 0
	for _, e := range inv.Entries {
		if e.Restorable() {
			n++
		}
	}
	return n
}

// refusalReason names the library's sentinel an error wraps, as a
// condition reason.
func refusalReason(err error) string {
	return reasonOf(err, []sentinelReason{
		{errSecretNamespace, "SecretNamespace"},
		{errAmbientCredentials, "CredentialsSecretNeeded"},
		{destination.ErrNoDriver, "NoDriver"},
		{destination.ErrLocationInUse, "LocationInUse"},
		{destination.ErrCredentialsInURL, "CredentialsInURL"},
		{destination.ErrInvalidURL, "InvalidURL"},
		{destination.ErrInvalidSpec, "InvalidSpec"},
		{destination.ErrRemoveDefault, "RemoveDefault"},
		{destination.ErrNoDefault, "NoDefault"},
		{destination.ErrInUse, "InUse"},
	})
}

// sentinelReason is the condition reason of errors wrapping a sentinel.
type sentinelReason struct {
	err    error
	reason string
}

// reasonOf returns the reason of the first sentinel err wraps, in table
// order, or "Error".
func reasonOf(err error, table []sentinelReason) string {
	for _, s := range table {
		if errors.Is(err, s.err) {
			return s.reason
		}
	}
	return "Error"
}

// camel turns a library reason such as "missing-bucket" into a condition
// reason, "MissingBucket".
func camel(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if r == '-' || r == '_' || r == ' ' {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
		}
		b.WriteRune(r)
		up = false
	}
	if b.Len() == 0 {
		return "Unknown"
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
