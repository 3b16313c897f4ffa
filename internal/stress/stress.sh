#!/usr/bin/env bash
# stress: run the packages whose tests use goroutines and clocks with
# `go test -race -count=N` beside CPU hogs that leave at most one core
# free, and name every test that failed, with how many of its runs did.
# `make stress` runs it; CI's single run passes only if these do.
#
# Arguments (or STRESS_PACKAGES): package:rounds pairs, e.g.
#   internal/stress/stress.sh ./schedule:20 ./backup:5
# Packages under ./examples/kubernetes/ run in that module.
#
# Environment:
#   STRESS_PACKAGES  the pairs when no argument is given
#   STRESS_ROUNDS    rounds of every package, overriding each pair's
#   STRESS_HOGS      busy loops beside the tests (default 2)
#   STRESS_RUN       a -run pattern (default: every test)
#   STRESS_SKIP      a -skip pattern (default: TestNextMatchesReference,
#                    a pure function checked against a reference, which
#                    takes 90 s a round under the race detector and load)
#   STRESS_TIMEOUT   go test's -timeout per package (default 20 minutes
#                    a round, at least 60m: go test's timeout bounds
#                    all the rounds of a package together)
#   STRESS_OUT       where the JSON and the failed tests' logs go
#                    (default ${TMPDIR:-/tmp}/etcdbackup-stress)
#
# Exit status: 0 when every run of every package passed, 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

default_packages="./schedule:20 ./backup:5 ./destination:5 ./restore:5 ./examples/kubernetes/controller:3"
if [ $# -gt 0 ]; then
	pairs=("$@")
else
	read -r -a pairs <<<"${STRESS_PACKAGES:-$default_packages}"
fi
hogs=${STRESS_HOGS:-2}
run=${STRESS_RUN:-}
skip=${STRESS_SKIP-TestNextMatchesReference}
timeout=${STRESS_TIMEOUT:-}
out=${STRESS_OUT:-${TMPDIR:-/tmp}/etcdbackup-stress}
mkdir -p "$out"

# The hogs: busy loops that end with this script, however it ends.
hog_pids=()
stop_hogs() {
	for p in "${hog_pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	hog_pids=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in $(seq 1 "$hogs"); do
	sh -c 'while :; do :; done' &
	hog_pids+=($!)
done
echo "stress: ${pairs[*]} beside $hogs busy loops; logs in $out"

status=0
summary=()
start=$SECONDS
for pair in "${pairs[@]}"; do
	pkg=${pair%:*}
	rounds=${pair##*:}
	[ "$pkg" = "$pair" ] && rounds=1
	rounds=${STRESS_ROUNDS:-$rounds}
	name=$(echo "${pkg#./}" | tr '/' '_')
	json="$out/$name.json"
	dir=$root
	rel=$pkg
	case $pkg in
	./examples/kubernetes/*)
		dir=$root/examples/kubernetes
		rel=./${pkg#./examples/kubernetes/}
		;;
	esac
	pkg_timeout=${timeout:-$((rounds * 20 > 60 ? rounds * 20 : 60))m}
	args=(-race -count="$rounds" -timeout "$pkg_timeout" -json)
	[ -n "$run" ] && args+=(-run "$run")
	[ -n "$skip" ] && args+=(-skip "$skip")
	t0=$SECONDS
	(cd "$dir" && go test "${args[@]}" "$rel") >"$json" 2>"$out/$name.stderr"
	rc=$?
	took=$((SECONDS - t0))
	# Top-level tests and subtests that failed, with their count, and
	# every test that passed.
	failures=$(jq -r 'select(.Action == "fail" and .Test != null) | .Test' "$json" 2>/dev/null | sort | uniq -c | sort -rn)
	passes=$(jq -r 'select(.Action == "pass" and .Test != null) | .Test' "$json" 2>/dev/null | wc -l)
	# The full output of every failed run, as make test prints it.
	go run ./internal/testreport <"$json" >"$out/$name.report" 2>&1
	if [ $rc -ne 0 ] || [ -n "$failures" ]; then
		status=1
		line="FAIL $pkg x$rounds (${took}s, go test exit $rc): $passes test runs passed"
		if [ -n "$failures" ]; then
			line+=$'\n'$(echo "$failures" | awk -v r="$rounds" '{printf "       %s failed %d of %d rounds\n", $2, $1, r}')
		else
			line+=$'\n'"       no test failed: the build or the package failed, see $out/$name.stderr"
		fi
		line+=$'\n'"       logs: $out/$name.report"
	else
		line="ok   $pkg x$rounds (${took}s): $passes test runs passed"
	fi
	echo "$line"
	summary+=("$line")
done
stop_hogs

echo
echo "stress summary ($((SECONDS - start))s, $hogs busy loops):"
printf '%s\n' "${summary[@]}"
exit $status
