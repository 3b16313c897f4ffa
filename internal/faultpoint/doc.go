// Package faultpoint marks the steps of a commit where a crash test kills
// the process. In a normal build Hit and Reader do nothing and cost
// nothing. Built with the tag etcdbackup_faultpoints, the process sends
// itself SIGKILL at the step that the variable ETCDBACKUP_FAULTPOINT
// names: "name" for its first pass there, "name:N" for its N-th.
//
// The steps are named where they are hit:
//
//	file-data-written   storage/blob: an object's bytes are written to its temporary file, not synced
//	file-data-synced    storage/blob: the temporary file is synced, not yet renamed or linked
//	file-attrs-synced   storage/blob: the attributes of the temporary object are synced
//	file-linked         storage/blob: the object has its name; for an exclusive put its attributes not yet
//	file-attrs-renamed  storage/blob: the attributes have their name; for a plain put the data not yet,
//	                    for an exclusive put the directories are not synced
//	file-dir-synced     storage/blob: every directory up to the destination is synced
//	upload-streaming    backup: the uploader read the first bytes of a data object
//	data-stored         backup: the data object is stored, its manifest not written
//	manifest-stored     backup: the manifest is stored, success not yet reported
//
// A data object that blob.Bucket.PutThenStage stores beside its manifest,
// on a file system whose syncs the bucket shares, is linked before it is
// synced: file-data-written twice, file-linked, file-attrs-renamed, then
// the synced steps once one shared sync has made both durable.
//
// A crash test builds the CLI with the tag into a temporary directory,
// runs it with the variable set, and checks what list and verify see.
package faultpoint

// Variable is the environment variable that names the step to kill at.
const Variable = "ETCDBACKUP_FAULTPOINT"
