//go:build benchlean

package main

import (
	"fmt"
	"os"
)

// The backup modes' binary: this package built with the benchlean tag,
// which leaves out the bench's etcd server, data generator, restore
// modes and report. The bench runs every backup mode in it (see
// leanBinary), so that a mode's peak RSS counts the code a host backing
// up links, not the bench's own: the pages of code and data the runtime
// and package initialisation touch are part of every process' resident
// set.
func main() {
	if len(os.Args) < 2 || os.Args[1] != "mode" && os.Args[1] != "pitr-follow" {
		fmt.Fprintln(os.Stderr, "etcdbackup-bench-lean: runs the bench's backup modes (etcdbackup-bench-lean mode -mode NAME) and its follower (pitr-follow); run etcdbackup-bench instead")
		os.Exit(2)
	}
	run := func() error { return runModeChild(os.Args[2:]) }
	if os.Args[1] == "pitr-follow" {
		run = runPITRFollower
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdbackup-bench-lean:", err)
		os.Exit(1)
	}
}

// restoreModes are none here: restore modes run in the bench binary.
var restoreModes []mode
