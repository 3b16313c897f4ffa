// Command testreport reads the output of `go test -json` on its standard
// input, prints a compact account (one line per package, the full output of
// every failed test) and exits non-zero when a test failed or was skipped.
//
// A skipped test counts as a failure because this project's integration
// tests must run wherever the test command runs: a missing server is a
// broken test environment, not a reason to pass.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	code, err := report(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func report(in io.Reader, out io.Writer) (int, error) {
	var (
		outputs = map[string]*strings.Builder{} // package + "\x00" + test
		failed  []string
		skipped []string
		passed  int
		pkgFail bool
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			// Build errors and other text arrive outside JSON.
			fmt.Fprintln(out, string(line))
			continue
		}
		id := ev.Package + "\x00" + ev.Test
		switch ev.Action {
		case "output":
			b := outputs[id]
			if b == nil {
				b = &strings.Builder{}
				outputs[id] = b
			}
			b.WriteString(ev.Output)
		case "pass":
			if ev.Test == "" {
				fmt.Fprintf(out, "ok   %s (%.1fs)\n", ev.Package, ev.Elapsed)
			} else {
				passed++
			}
			delete(outputs, id)
		case "skip":
			if ev.Test == "" {
				delete(outputs, id) // a package without tests
				continue
			}
			skipped = append(skipped, ev.Package+" "+ev.Test)
			if b := outputs[id]; b != nil {
				fmt.Fprint(out, b.String())
			}
		case "fail":
			if ev.Test == "" {
				pkgFail = true
				fmt.Fprintf(out, "FAIL %s (%.1fs)\n", ev.Package, ev.Elapsed)
				if b := outputs[id]; b != nil {
					fmt.Fprint(out, b.String())
				}
				continue
			}
			failed = append(failed, ev.Package+" "+ev.Test)
			if b := outputs[id]; b != nil {
				fmt.Fprint(out, b.String())
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 2, err
	}
	slices.Sort(skipped)
	fmt.Fprintf(out, "\n%d tests passed, %d failed, %d skipped\n", passed, len(failed), len(skipped))
	for _, s := range skipped {
		fmt.Fprintln(out, "SKIPPED (not allowed):", s)
	}
	for _, f := range failed {
		fmt.Fprintln(out, "FAILED:", f)
	}
	if pkgFail || len(failed) > 0 || len(skipped) > 0 {
		return 1, nil
	}
	return 0, nil
}
