// Package doccheck finds exported identifiers without a doc comment, so
// that a test can hold the whole module to godoc's standard.
package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// Undocumented walks the Go files under root (tests, testdata and hidden or
// output folders excepted) and returns "file:line: kind Name" for every
// exported function, method of an exported type, type, constant and
// variable that has no doc comment.
func Undocumented(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bench-out") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		report := func(pos token.Pos, kind, name string) {
			p := fset.Position(pos)
			rel, _ := filepath.Rel(root, p.Filename)
			out = append(out, fmt.Sprintf("%s:%d: %s %s", rel, p.Line, kind, name))
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Name.IsExported() && decl.Doc == nil && exportedReceiver(decl) {
					report(decl.Pos(), "func", decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() && decl.Doc == nil && spec.Doc == nil {
							report(spec.Pos(), "type", spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() && decl.Doc == nil && spec.Doc == nil && spec.Comment == nil {
								report(n.Pos(), "value", n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	return out, err
}

// exportedReceiver reports whether a function is a plain function or a
// method of an exported type: methods of unexported types are not in godoc.
func exportedReceiver(f *ast.FuncDecl) bool {
	if f.Recv == nil || len(f.Recv.List) == 0 {
		return true
	}
	t := f.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	id, ok := t.(*ast.Ident)
	return !ok || id.IsExported()
}
