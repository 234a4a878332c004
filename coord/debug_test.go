package coord

import "fmt"

func (c *treeCache) debugDump(rel string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[rel]
	if n == nil {
		return rel + ": <nil>"
	}
	return fmt.Sprintf("%s: children=%v childW=%v stub=%v", rel, n.children, n.childW != nil, n.stub)
}

func init() {
	debugHook = func(j *job, items []int) {
		for _, it := range items {
			kids, _, err := j.st.Children(j.regCtx, j.p.item(it))
			fmt.Println("DEBUG", j.id, j.cache.debugDump(relItem(it)), "store:", kids, err)
		}
	}
}
