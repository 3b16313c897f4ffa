// Command restore-member is the restore step that runs beside an etcd
// member, as an init container of the member's pod (etcd on a
// StatefulSet's volume, not in the controller's filesystem). It reads the
// plan the controller published in an EtcdRestore's status.plan (an
// EtcdRestore with members), restores this member's data directory from
// it, and reports in the EtcdRestore's status.members:
//
//	restore-member --restore=NAMESPACE/NAME --member=NAME --data-dir=/var/lib/etcd/data
//
// It is idempotent: a pod that restarts after its member was restored
// finds the data directory marked with the restore's UID and reports
// success again without touching it. A restore that ended (Completed or
// Failed) is never applied again: the step succeeds without touching the
// data directory when it holds that restore, or when the member is not one
// of a Completed restore's members (it was added since), and refuses
// otherwise (a replaced volume would get the old plan's data): delete the
// EtcdRestore, or remove the init container, once it ended. The plan is
// restored only when it is the one whose digest the controller recorded
// in the restore's annotation (see v1alpha1.PlanDigestAnnotation), and,
// with --cluster, only for that cluster. A data directory that holds other
// data (the member's old one) is moved aside to DIR.replaced-UID, never
// deleted. The destination's credentials come from the pod's environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the default chain), never
// from the controller, and go only to --destination-url: a plan naming
// another destination is refused; the pod's service account needs get on etcdrestores
// and update on etcdrestores/status. When the EtcdRestore does not exist,
// the step does nothing and succeeds: the member starts on its data as it
// is.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], log); err != nil {
		log.Error("restore-member", "err", err)
		os.Exit(1)
	}
}

// run parses args, waits for the plan, restores the member and reports.
func run(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("restore-member", flag.ContinueOnError)
	name := fs.String("restore", "", "the EtcdRestore, `namespace/name`")
	member := fs.String("member", "", "this member's `name` in the restore's members")
	dataDir := fs.String("data-dir", "", "the member's data `directory` (not the volume's root: it is renamed into place)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `file` outside the cluster (default: $KUBECONFIG, the pod's service account)")
	cluster := fs.String("cluster", "", "the etcd `cluster` this member is of: a restore of another is refused")
	destURL := fs.String("destination-url", "", "the `URL` of the destination this pod's credentials are for: a plan naming another is refused")
	waitFor := fs.Duration("wait", 10*time.Minute, "how long to wait for the controller's plan")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, n, ok := strings.Cut(*name, "/")
	if !ok || ns == "" || n == "" || *member == "" || *dataDir == "" || *destURL == "" {
		return errors.New("--restore=NAMESPACE/NAME, --member, --data-dir and --destination-url are required")
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: ns, Name: n}
	rs, err := waitPlan(ctx, c, key, *waitFor)
	if apierrors.IsNotFound(err) {
		// No restore is asked for (any more): the member starts on its
		// data directory as it is, so an init container left in place
		// after the EtcdRestore was deleted never holds etcd back.
		log.Info("no such restore: nothing to do", "restore", key.String())
		return nil
	}
	if err != nil {
		return err
	}
	if *cluster != "" && rs.Spec.Cluster != *cluster {
		return fmt.Errorf("restore %s is of cluster %q, not --cluster %q", key, rs.Spec.Cluster, *cluster)
	}
	if rs.Status.Phase == v1alpha1.PhaseCompleted || rs.Status.Phase == v1alpha1.PhaseFailed {
		return ended(rs, *member, *dataDir, log)
	}
	st := v1alpha1.MemberRestoreStatus{Name: *member, Phase: v1alpha1.PhaseCompleted, PlanDigest: rs.Status.Plan.Digest()}
	var id string
	rerr := checkPlan(rs, *member, *destURL)
	if rerr == nil {
		i := slices.IndexFunc(rs.Spec.Members, func(m v1alpha1.PlannedMember) bool { return m.Name == *member })
		id, rerr = restoreMember(ctx, rs, rs.Spec.Members[i], *dataDir, log)
	}
	if rerr != nil {
		st.Phase, st.Message = v1alpha1.PhaseFailed, rerr.Error()
	}
	st.MemberID = id
	if err := report(ctx, c, key, st); err != nil {
		return errors.Join(rerr, fmt.Errorf("report: %w", err))
	}
	return rerr
}

// checkPlan refuses a running restore's plan that this member must not
// restore: one that is not the plan whose digest the controller recorded
// (status.plan may be written by others, the annotation may not), one
// that sends the pod's credentials elsewhere than its own spec says, or
// one that does not list the member.
func checkPlan(rs *v1alpha1.EtcdRestore, member, destURL string) error {
	key := client.ObjectKeyFromObject(rs)
	if want, got := rs.Annotations[v1alpha1.PlanDigestAnnotation], rs.Status.Plan.Digest(); got != want {
		return fmt.Errorf("the plan of restore %s is not the one the controller published (digest %s, annotation %s)", key, got, want)
	}
	if rs.Status.Plan.URL != destURL {
		return fmt.Errorf("the plan of restore %s reads destination %s at %s, not --destination-url", key, rs.Status.Plan.Destination, rs.Status.Plan.URL)
	}
	if !slices.ContainsFunc(rs.Spec.Members, func(m v1alpha1.PlannedMember) bool { return m.Name == member }) {
		return fmt.Errorf("member %q is not one of the members of running restore %s", member, key)
	}
	return nil
}

// ended decides what the step does for a restore that ended: it never
// restores again. A member whose data directory holds this restore
// starts on it (the pod restarted); a member a Completed restore does not
// list (added since) starts on its data as it is; any other member is
// refused, since it would start empty or on data the restore replaced
// (its volume was replaced, or the restore failed): delete the
// EtcdRestore, or remove the init container, to start it anyway.
func ended(rs *v1alpha1.EtcdRestore, member, dataDir string, log *slog.Logger) error {
	key := client.ObjectKeyFromObject(rs)
	if _, ok := readMarker(filepath.Clean(dataDir), string(rs.UID)); ok {
		log.Info("member already restored", "restore", key.String(), "member", member, "data_dir", dataDir)
		return nil
	}
	listed := slices.ContainsFunc(rs.Spec.Members, func(m v1alpha1.PlannedMember) bool { return m.Name == member })
	if rs.Status.Phase == v1alpha1.PhaseCompleted && !listed {
		log.Info("member not in the completed restore: nothing to do", "restore", key.String(), "member", member)
		return nil
	}
	return fmt.Errorf("restore %s is %s and data directory %s does not hold it: it is not restored again; "+
		"delete the EtcdRestore (or remove the init container) to start the member on its data as it is", key, rs.Status.Phase, dataDir)
}

// waitPlan waits until the controller published the restore's plan and
// its digest, or the restore ended.
func waitPlan(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) (*v1alpha1.EtcdRestore, error) {
	var rs v1alpha1.EtcdRestore
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &rs); err != nil {
			return false, err
		}
		if rs.Status.Phase == v1alpha1.PhaseCompleted || rs.Status.Phase == v1alpha1.PhaseFailed {
			return true, nil
		}
		return rs.Status.Plan != nil && rs.Annotations[v1alpha1.PlanDigestAnnotation] != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("plan of restore %s: %w", key, err)
	}
	return &rs, nil
}

// report writes the member's outcome into the restore's status.members,
// again on conflicts with the other members and the controller.
func report(ctx context.Context, c client.Client, key types.NamespacedName, st v1alpha1.MemberRestoreStatus) error {
	t := metav1.Now()
	st.Time = &t
	backoff := wait.Backoff{Steps: 30, Duration: 50 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 2 * time.Second}
	return retry.RetryOnConflict(backoff, func() error {
		var rs v1alpha1.EtcdRestore
		if err := c.Get(ctx, key, &rs); err != nil {
			return err
		}
		i := slices.IndexFunc(rs.Status.Members, func(m v1alpha1.MemberRestoreStatus) bool { return m.Name == st.Name })
		if i < 0 {
			rs.Status.Members = append(rs.Status.Members, st)
		} else {
			rs.Status.Members[i] = st
		}
		return c.Status().Update(ctx, &rs)
	})
}
