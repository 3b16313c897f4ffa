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
// success again without touching it. A data directory that holds other
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
	// The plan is in a status that others may write: the pod's
	// credentials go only where the pod's own spec says.
	if rs.Status.Plan.URL != *destURL {
		return fmt.Errorf("the plan of restore %s reads destination %s at %s, not --destination-url", key, rs.Status.Plan.Destination, rs.Status.Plan.URL)
	}
	i := slices.IndexFunc(rs.Spec.Members, func(m v1alpha1.PlannedMember) bool { return m.Name == *member })
	if i < 0 {
		return fmt.Errorf("member %q is not one of the restore's members", *member)
	}
	st := v1alpha1.MemberRestoreStatus{Name: *member, Phase: v1alpha1.PhaseCompleted}
	id, rerr := restoreMember(ctx, rs, rs.Spec.Members[i], *dataDir, log)
	if rerr != nil {
		st.Phase, st.Message = v1alpha1.PhaseFailed, rerr.Error()
	}
	st.MemberID = id
	if err := report(ctx, c, key, st); err != nil {
		return errors.Join(rerr, fmt.Errorf("report: %w", err))
	}
	return rerr
}

// waitPlan waits until the controller published the restore's plan.
func waitPlan(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) (*v1alpha1.EtcdRestore, error) {
	var rs v1alpha1.EtcdRestore
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &rs); err != nil {
			return false, err
		}
		if rs.Status.Phase == v1alpha1.PhaseFailed && rs.Status.Plan == nil {
			return false, fmt.Errorf("restore %s failed: %s", key, rs.Status.Message)
		}
		return rs.Status.Plan != nil, nil
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
