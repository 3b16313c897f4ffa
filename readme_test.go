package etcdbackup_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSafetyGuaranteesNameTheirTests: every guarantee of the README's
// "Safety guarantees" section has a line in the list under it, and every
// test or fuzz target that list names exists, in either module.
func TestSafetyGuaranteesNameTheirTests(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := sectionOf(t, string(raw), "## Safety guarantees")
	intro := "The tests that prove each guarantee"
	i := strings.Index(section, intro)
	if i < 0 {
		t.Fatalf("the section has no list of tests (a paragraph starting %q)", intro)
	}
	guarantees, list := section[:i], section[i:]

	bullet := regexp.MustCompile(`(?m)^- \*\*([^*]+)\*\*`)
	listed := map[string]string{} // guarantee -> its line
	for _, item := range strings.Split(list, "\n- ")[1:] {
		if m := regexp.MustCompile(`^\*\*([^*]+)\*\*`).FindStringSubmatch(item); m != nil {
			listed[strings.TrimSuffix(m[1], ".")] = item
		}
	}
	names := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	for _, m := range bullet.FindAllStringSubmatch(guarantees, -1) {
		g := strings.TrimSuffix(m[1], ".")
		item, ok := listed[g]
		if !ok {
			t.Errorf("guarantee %q names no test in the list", g)
			continue
		}
		if len(names.FindAllString(item, -1)) == 0 {
			t.Errorf("guarantee %q: its line names no test", g)
		}
	}

	defined := testFuncs(t)
	for _, m := range names.FindAllStringSubmatch(list, -1) {
		if !defined[m[1]] {
			t.Errorf("the README names %s, which no _test.go file defines", m[1])
		}
	}
}

// sectionOf returns the text of the level-2 section that heading opens.
func sectionOf(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q", heading)
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// testFuncs returns the names of the Test and Fuzz functions of every
// _test.go file under the module's root, the examples' module included.
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	out := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
