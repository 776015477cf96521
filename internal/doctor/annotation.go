package doctor

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/config"
)

const annotationCheck = "annotation restore"

// checkAnnotationRestore says whether the shims of each running containerd
// restore pods from the checkpoint images their annotations name, from
// the policy file CRYO_ANNOTATION_RESTORE names in containerd's
// environment (the shims inherit it). On, the shim pulls on a pod's behalf
// with the node's identity: a namespace allowed the node's credentials is
// a warning, since any pod in it reads whatever they reach under its
// repositories.
func (e *env) checkAnnotationRestore(c containerdHost) []Check {
	if c.missing != "" {
		return []Check{e.notAtAddress(annotationCheck, c)}
	}
	if !c.found() {
		return []Check{{Name: annotationCheck, Status: Skip, Detail: noContainerd}}
	}
	if len(c.daemons) == 0 {
		return []Check{annotationPolicyCheck("containerd (not running; this environment)", e.cfg.AnnotationRestore)}
	}
	var res []Check
	for _, d := range c.daemons {
		environ := readNul(filepath.Join(e.host.Proc, strconv.Itoa(d.pid), "environ"))
		who, path := d.who(true), config.Lookup(environ, config.EnvAnnotationRestore)
		if environ == nil {
			who, path = d.who(true)+" (its environment is unreadable; this one's)", e.cfg.AnnotationRestore
		}
		res = append(res, annotationPolicyCheck(who, path))
	}
	return res
}

// annotationPolicyCheck judges the policy file path ("" when unset).
func annotationPolicyCheck(who, path string) Check {
	p, err := config.LoadAnnotationPolicy(path)
	if err != nil {
		return Check{annotationCheck, Fail, who + ": " + err.Error() + ": every pod that names a checkpoint image is refused",
			"fix the file (docs/kubernetes.md, \"Start a pod from a checkpoint image\"), or unset " + config.EnvAnnotationRestore}
	}
	if !p.Enabled {
		why := config.EnvAnnotationRestore + " is unset"
		if path != "" {
			why = path + " does not set \"enabled\": true"
		}
		return Check{Name: annotationCheck, Status: OK, Detail: who + ": off (" + why + "): pods that name a checkpoint image (cryo.io/checkpoint-image) are refused"}
	}
	detail := who + ": on (" + path + "): " + describePolicy(p)
	if ns := p.NodeCredentialNamespaces(); len(ns) > 0 {
		return Check{annotationCheck, Warn, detail + "; " + quoteAll(ns) + " pull with the node's registry credentials: any pod there reads whatever they reach under its repositories",
			"set use_node_credentials to false in " + path + " unless every pod of those namespaces may read those repositories"}
	}
	return Check{Name: annotationCheck, Status: OK, Detail: detail + "; anonymous pulls"}
}

// describePolicy lists the namespaces, their repositories and the plain
// HTTP registries.
func describePolicy(p config.AnnotationPolicy) string {
	if len(p.Namespaces) == 0 {
		return "no namespace is allowed a repository, so every pod that names a checkpoint image is refused"
	}
	var parts []string
	for ns, rule := range p.Namespaces {
		parts = append(parts, fmt.Sprintf("%q → %s", ns, strings.Join(rule.Repositories, ", ")))
	}
	sort.Strings(parts)
	s := "namespaces " + strings.Join(parts, "; ")
	if len(p.InsecureRegistries) > 0 {
		s += "; plain HTTP to " + strings.Join(p.InsecureRegistries, ", ")
	}
	return s
}
