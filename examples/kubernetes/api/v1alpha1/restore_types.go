package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlanDigestAnnotation is the annotation in which the controller records
// the Digest of the plan it publishes in an EtcdRestore's status.plan,
// before publishing it. The members' restore steps may update the
// status, not the object's metadata: a step restores a plan only when it
// matches this digest, and the controller fails a restore whose plan or
// member reports do not.
const PlanDigestAnnotation = "backup.etcdbackup.io/plan-digest"

// RestoreMember is the etcd member whose data directory is restored, with
// the flags of `etcdutl snapshot restore`.
type RestoreMember struct {
	// Name is the member's name (--name).
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// DataDir is the data directory to create, relative to the
	// controller's restore directory (the volume it restores onto). It
	// must not exist yet.
	// +kubebuilder:validation:MinLength=1
	DataDir string `json:"dataDir"`
	// PeerURLs are the member's initial advertise peer URLs.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	PeerURLs []string `json:"peerURLs"`
	// InitialCluster lists every member as name=peerURL,... Empty means
	// this member alone.
	// +optional
	InitialCluster string `json:"initialCluster,omitempty"`
	// ClusterToken is the initial cluster token. Empty means etcd-cluster.
	// +optional
	ClusterToken string `json:"clusterToken,omitempty"`
	// RevisionBump raises the restored store's revision by that much and
	// marks it compacted, so that watchers relist.
	// +optional
	RevisionBump int64 `json:"revisionBump,omitempty"`
}

// EtcdRestoreSpec is one restore of a member's data directory from a
// cluster's backup.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an EtcdRestore's spec is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.backupID) ? 1 : 0) + (has(self.before) ? 1 : 0) + (has(self.revision) ? 1 : 0) + (has(self.time) ? 1 : 0) <= 1",message="give at most one of backupID, before, revision and time: backupID and before pick a full backup, revision and time a point of the continuous backup"
// +kubebuilder:validation:XValidation:rule="!has(self.nearestEarlier) || !self.nearestEarlier || has(self.revision) || has(self.time)",message="nearestEarlier is for a restore to a revision or a time"
// +kubebuilder:validation:XValidation:rule="(has(self.member) ? 1 : 0) + (has(self.members) ? 1 : 0) + (has(self.import) ? 1 : 0) == 1",message="give one of member (the controller restores it into its restore directory), members (each member restores beside its etcd) and import (a keys-json backup into the live etcd)"
// +kubebuilder:validation:XValidation:rule="!has(self.import) || (!has(self.revision) && !has(self.time))",message="import restores a keys-json backup: revision and time are for snapshot restores"
// +kubebuilder:validation:XValidation:rule="has(self.members) || (!has(self.clusterToken) && !has(self.revisionBump))",message="clusterToken and revisionBump are for members; a member has its own"
type EtcdRestoreSpec struct {
	// Cluster names the cluster whose backup is restored.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// Destination names the BackupDestination to restore from. Empty
	// means every destination: the newest backup wins.
	// +optional
	Destination string `json:"destination,omitempty"`
	// BackupID selects a backup by ID. Empty means the newest restorable.
	// +kubebuilder:validation:MinLength=1
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// Before restricts the search to backups created strictly before it.
	// +optional
	Before *metav1.Time `json:"before,omitempty"`
	// Revision restores the cluster's store at that revision: the newest
	// full backup at or before it, then the continuous backup's segments
	// up to it.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Time restores the last revision the continuous backup received at
	// or before it.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// NearestEarlier, when the revision or time lies in a gap of the
	// continuous backup, restores the nearest earlier point that can be
	// restored, and says so in status. By default such a restore fails.
	// +optional
	NearestEarlier bool `json:"nearestEarlier,omitempty"`
	// Member is the data directory the controller restores, in its
	// restore directory.
	// +optional
	Member *RestoreMember `json:"member,omitempty"`
	// Members restores every member of the cluster where its etcd runs:
	// the controller publishes what to restore in status.plan, and the
	// restore step beside each member (cmd/restore-member, an init
	// container of the member's pod) writes that member's data directory
	// and reports in status.members.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=9
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []PlannedMember `json:"members,omitempty"`
	// Import imports a keys-json backup (by ID, before a time, or the
	// newest) into the cluster's live etcd, through its client, instead of
	// restoring a data directory.
	// +optional
	Import *KeysImport `json:"import,omitempty"`
	// ClusterToken is the members' initial cluster token. Empty means
	// etcd-cluster.
	// +optional
	ClusterToken string `json:"clusterToken,omitempty"`
	// RevisionBump raises the members' revision by that much and marks it
	// compacted, so that watchers relist.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RevisionBump int64 `json:"revisionBump,omitempty"`
}

// KeysImport is an import of a keys-json backup into a live etcd.
type KeysImport struct {
	// Prefixes narrow the keys imported, such as /registry/configmaps/.
	// Empty means every key of the backup. An import never touches a key
	// outside the backup's prefixes and these.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +listType=set
	// +optional
	Prefixes []string `json:"prefixes,omitempty"`
	// Mode is create-only (the default: an existing key is left alone and
	// counted as a conflict) or overwrite.
	// +kubebuilder:validation:Enum=create-only;overwrite
	// +kubebuilder:default=create-only
	// +optional
	Mode string `json:"mode,omitempty"`
	// DryRun counts and lists in status what the import would change, and
	// changes nothing.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// ImportStatus counts what an import changed, or with dryRun would change.
type ImportStatus struct {
	// Revision is the revision the backup was read at.
	Revision int64 `json:"revision,omitempty"`
	// Keys is how many keys of the backup the prefixes selected.
	Keys int64 `json:"keys,omitempty"`
	// Created, Overwritten and Unchanged count the keys; Conflicts the
	// existing keys with another value that create-only left alone;
	// Leased the keys that had a lease in the source, not imported.
	// +optional
	Created int64 `json:"created,omitempty"`
	// +optional
	Overwritten int64 `json:"overwritten,omitempty"`
	// +optional
	Unchanged int64 `json:"unchanged,omitempty"`
	// +optional
	Conflicts int64 `json:"conflicts,omitempty"`
	// +optional
	Leased int64 `json:"leased,omitempty"`
	// DryRun says nothing was changed.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// Changes are the first changes, in key order, as "OP KEY" (added,
	// removed, changed; keys quoted).
	// +optional
	// +listType=atomic
	Changes []string `json:"changes,omitempty"`
}

// PlannedMember is a member of the cluster restored beside its etcd.
type PlannedMember struct {
	// Name is the member's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// PeerURLs are its initial advertise peer URLs.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	PeerURLs []string `json:"peerURLs"`
}

// RestorePlan is what the restore step beside each member restores: the
// backups are named exactly, so that every member restores the same data.
type RestorePlan struct {
	// Destination names the BackupDestination, and URL is its location:
	// the restore step opens it with credentials of its own (its pod's
	// environment), never the controller's.
	Destination string `json:"destination"`
	URL         string `json:"url"`
	// BackupID is the full backup restored first.
	BackupID string `json:"backupID"`
	// Segments are the IDs of the continuous backup's segments applied
	// after it, in order.
	// +optional
	// +listType=atomic
	Segments []string `json:"segments,omitempty"`
	// Revision or Time is the point the segments are applied to.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// InitialCluster lists every member as name=peerURL,...
	InitialCluster string `json:"initialCluster"`
	// +optional
	ClusterToken string `json:"clusterToken,omitempty"`
	// +optional
	RevisionBump int64 `json:"revisionBump,omitempty"`
}

// Digest returns the SHA-256 of the plan's JSON encoding, in hexadecimal.
func (p *RestorePlan) Digest() string {
	b, err := json.Marshal(p)
	if err != nil {
		return "" // a plan always encodes
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// MemberRestoreStatus is what the restore step of a member reported.
type MemberRestoreStatus struct {
	// Name is the member's name.
	Name string `json:"name"`
	// Phase is Completed or Failed.
	Phase Phase `json:"phase"`
	// MemberID is the member's ID when it starts, in hexadecimal.
	// +optional
	MemberID string `json:"memberID,omitempty"`
	// PlanDigest is the Digest of the plan the step restored (or
	// refused): the controller fails the restore when it is not the
	// plan it published.
	// +optional
	PlanDigest string `json:"planDigest,omitempty"`
	// Message says why the step failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Time is when the step reported.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// EtcdRestoreStatus is the outcome of a restore.
type EtcdRestoreStatus struct {
	// Phase is Pending, Running, Completed or Failed.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Conditions has Succeeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// BackupID and Destination say which backup was restored.
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// +optional
	Destination string `json:"destination,omitempty"`
	// MemberID and ClusterID are the IDs the member has when it starts,
	// in hexadecimal.
	// +optional
	MemberID string `json:"memberID,omitempty"`
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// Revision is the revision the member's store holds, before any
	// revision bump: the point's, or the full backup's.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Segments counts the continuous backup's segments applied after the
	// full backup.
	// +optional
	Segments int64 `json:"segments,omitempty"`
	// Gap says what was skipped when nearestEarlier restored an earlier
	// point than the one asked for.
	// +optional
	Gap string `json:"gap,omitempty"`
	// Message says why the restore failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Import is, for an import, what it changed or would change.
	// +optional
	Import *ImportStatus `json:"import,omitempty"`
	// Plan is, for members, what each restores.
	// +optional
	Plan *RestorePlan `json:"plan,omitempty"`
	// Members is what the restore step of each member reported.
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []MemberRestoreStatus `json:"members,omitempty"`
	// StartTime and CompletionTime bound the restore.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// EtcdRestore restores one member's data directory from a backup. The
// member's etcd is then started on it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.backupID`
type EtcdRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdRestoreSpec   `json:"spec"`
	Status EtcdRestoreStatus `json:"status,omitempty"`
}

// EtcdRestoreList is a list of EtcdRestores.
//
// +kubebuilder:object:root=true
type EtcdRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdRestore `json:"items"`
}
