package criuimg

import (
	"errors"
	"io/fs"
	"slices"
	"testing"
)

// The single facts read the same images as Read, with its checks.
func TestFacts(t *testing.T) {
	pids, err := TreePIDs(tinyDir)
	if err != nil || !slices.Equal(pids, []int{21088, 21091}) {
		t.Errorf("TreePIDs = %v, %v; want the parent and its child", pids, err)
	}
	tree, err := Tree(tinyDir)
	if err != nil || !slices.Equal(tree, []TreeProcess{{21088, "tiny"}, {21091, "tiny"}}) {
		t.Errorf("Tree = %+v, %v", tree, err)
	}
	files, err := Files(tinyDir)
	listening := 0
	for _, f := range files {
		if f.GetIsk().GetSrcPort() == 47311 {
			listening++
		}
	}
	if err != nil || listening != 1 {
		t.Errorf("Files: %d sockets on 47311, %v; want the listener", listening, err)
	}
	if _, err := TreePIDs(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no pstree.img: %v, want fs.ErrNotExist", err)
	}
}
