// Package migration loads numbered up/down SQL files embedded in a backend.
// Files are named NNNN_name.up.sql and NNNN_name.down.sql.
package migration

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
)

// File is one migration's SQL.
type File struct {
	Version int
	Name    string
	Up      string
	Down    string
}

var fileName = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)

// Load reads every migration in dir of fsys, sorted by version. Each version
// must have both an up and a down file, and versions must be 1, 2, 3, ….
func Load(fsys fs.FS, dir string) ([]File, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byVersion := map[int]*File{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must be NNNN_name.up.sql or .down.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		f := byVersion[v]
		if f == nil {
			f = &File{Version: v, Name: m[2]}
			byVersion[v] = f
		}
		if m[3] == "up" {
			f.Up = string(body)
		} else {
			f.Down = string(body)
		}
	}
	files := make([]File, 0, len(byVersion))
	for _, f := range byVersion {
		if f.Up == "" || f.Down == "" {
			return nil, fmt.Errorf("migration %d_%s: needs both up and down files", f.Version, f.Name)
		}
		files = append(files, *f)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Version < files[j].Version })
	for i, f := range files {
		if f.Version != i+1 {
			return nil, fmt.Errorf("migration versions must be 1..n without gaps; found %d at position %d", f.Version, i+1)
		}
	}
	return files, nil
}

// Versions lists the versions of files, in their order: the migrations a
// binary knows, which store.UnknownMigrations compares with those applied.
func Versions(files []File) []int {
	vs := make([]int, len(files))
	for i, f := range files {
		vs[i] = f.Version
	}
	return vs
}
