// The consistency test's linearizability checker (tests/consistency): reads
// the histories that consistency.py prepared, one per key, and checks each
// with Porcupine against a model of that key:
//
//   - a register: a znode's data and version, with create, a linearizable
//     read (sync then getData), setData (version -1), compare-and-set
//     (setData with a version, or a multi of check and setData);
//   - a counter: a parent whose sequential creates each take the next
//     number (its cversion), every create's number known from the
//     children listed at the end.
//
// An operation whose outcome is unknown (CONNECTIONLOSS, no reply) has the
// return time -1 in the input: it is taken to return after everything else,
// so it may have taken effect at any point after its call, or never.
//
// Usage: checker IN.json OUT.json [VISUALIZATION_DIR]
// IN:  {"timeout_s": N, "registers": {key: [op...]}, "counters": {key: [op...]}}
//      op: {"c": client, "call": ns, "ret": ns or -1, "in": {...}, "out": {...}}
// OUT: {"registers": {key: {"result": "ok"|"illegal"|"unknown", "ops": n}}, "counters": {...}}
// With VISUALIZATION_DIR, Porcupine's HTML view of every key that is not
// linearizable is written there (<kind>-<key>.html).
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type op struct {
	C    int             `json:"c"`
	Call int64           `json:"call"`
	Ret  int64           `json:"ret"`
	In   json.RawMessage `json:"in"`
	Out  json.RawMessage `json:"out"`
}

type regIn struct {
	Kind string `json:"kind"` // create, read, set, cas
	V    string `json:"v"`
	Ver  int    `json:"ver"`
}

type regOut struct {
	Known   bool   `json:"known"`
	Err     string `json:"err"` // "", NoNode, NodeExists, BadVersion
	V       string `json:"v"`
	Version int    `json:"version"`
}

type regState struct {
	Exists  bool
	V       string
	Version int
}

func regStep(st interface{}, in interface{}, out interface{}) (bool, interface{}) {
	s := st.(regState)
	i := in.(regIn)
	o := out.(regOut)
	switch i.Kind {
	case "read":
		if !o.Known {
			return true, s
		}
		if o.Err == "NoNode" {
			return !s.Exists, s
		}
		return s.Exists && o.Err == "" && s.V == o.V && s.Version == o.Version, s
	case "create":
		if !o.Known {
			if !s.Exists {
				return true, regState{true, i.V, 0}
			}
			return true, s
		}
		if o.Err == "NodeExists" {
			return s.Exists, s
		}
		return !s.Exists && o.Err == "" && o.Version == 0, regState{true, i.V, 0}
	case "set", "cas":
		applies := s.Exists && (i.Kind == "set" || i.Ver == s.Version)
		next := s
		if applies {
			next = regState{true, i.V, s.Version + 1}
		}
		if !o.Known {
			return true, next
		}
		switch o.Err {
		case "":
			return applies && o.Version == s.Version+1, next
		case "NoNode":
			return !s.Exists, s
		case "BadVersion":
			return s.Exists && i.Kind == "cas" && i.Ver != s.Version, s
		}
		return false, s
	}
	return false, s
}

var registerModel = porcupine.Model{
	Init: func() interface{} { return regState{} },
	Step: regStep,
	Equal: func(a, b interface{}) bool {
		return a.(regState) == b.(regState)
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(regIn), out.(regOut)
		res := "?"
		if o.Known {
			if o.Err != "" {
				res = o.Err
			} else {
				res = fmt.Sprintf("%q v%d", o.V, o.Version)
			}
		}
		return fmt.Sprintf("%s(%q, ver %d) -> %s", i.Kind, i.V, i.Ver, res)
	},
	DescribeState: func(st interface{}) string {
		s := st.(regState)
		if !s.Exists {
			return "absent"
		}
		return fmt.Sprintf("%q v%d", s.V, s.Version)
	},
}

type ctrIn struct {
	Token string `json:"token"`
}

type ctrOut struct {
	N int `json:"n"`
}

var counterModel = porcupine.Model{
	Init: func() interface{} { return 0 },
	Step: func(st interface{}, in interface{}, out interface{}) (bool, interface{}) {
		n := out.(ctrOut).N
		return n == st.(int), n + 1
	},
	DescribeOperation: func(in, out interface{}) string {
		return fmt.Sprintf("create %s -> %d", in.(ctrIn).Token, out.(ctrOut).N)
	},
	DescribeState: func(st interface{}) string { return fmt.Sprintf("next %d", st.(int)) },
}

type result struct {
	Result string `json:"result"`
	Ops    int    `json:"ops"`
}

func operations(ops []op, decode func(op) (interface{}, interface{}, error)) ([]porcupine.Operation, error) {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in, res, err := decode(o)
		if err != nil {
			return nil, err
		}
		ret := o.Ret
		if ret < 0 {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: o.C, Input: in, Call: o.Call, Output: res, Return: ret})
	}
	return out, nil
}

func decodeRegister(o op) (interface{}, interface{}, error) {
	var i regIn
	var r regOut
	if err := json.Unmarshal(o.In, &i); err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(o.Out, &r); err != nil {
		return nil, nil, err
	}
	return i, r, nil
}

func decodeCounter(o op) (interface{}, interface{}, error) {
	var i ctrIn
	var r ctrOut
	if err := json.Unmarshal(o.In, &i); err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(o.Out, &r); err != nil {
		return nil, nil, err
	}
	return i, r, nil
}

func check(kind string, model porcupine.Model, hists map[string][]op, decode func(op) (interface{}, interface{}, error),
	timeout time.Duration, vis string) (map[string]result, error) {
	keys := make([]string, 0, len(hists))
	for k := range hists {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := map[string]result{}
	for _, k := range keys {
		ops, err := operations(hists[k], decode)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", kind, k, err)
		}
		res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		out[k] = result{Result: string(res), Ops: len(ops)}
		if res == porcupine.Illegal && vis != "" {
			name := kind + "-" + strings.Trim(strings.ReplaceAll(k, "/", "_"), "_") + ".html"
			if err := porcupine.VisualizePath(model, info, filepath.Join(vis, name)); err != nil {
				fmt.Fprintf(os.Stderr, "checker: visualization of %s: %v\n", k, err)
			}
		}
	}
	return out, nil
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: checker IN.json OUT.json [VISUALIZATION_DIR]")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "checker:", err)
		os.Exit(2)
	}
	var in struct {
		TimeoutS  float64         `json:"timeout_s"`
		Registers map[string][]op `json:"registers"`
		Counters  map[string][]op `json:"counters"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintln(os.Stderr, "checker:", err)
		os.Exit(2)
	}
	vis := ""
	if len(os.Args) > 3 {
		vis = os.Args[3]
		if err := os.MkdirAll(vis, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "checker:", err)
			os.Exit(2)
		}
	}
	timeout := time.Duration(in.TimeoutS * float64(time.Second))
	regs, err := check("register", registerModel, in.Registers, decodeRegister, timeout, vis)
	if err == nil {
		var ctrs map[string]result
		ctrs, err = check("counter", counterModel, in.Counters, decodeCounter, timeout, vis)
		if err == nil {
			var b []byte
			b, err = json.Marshal(map[string]interface{}{"registers": regs, "counters": ctrs})
			if err == nil {
				err = os.WriteFile(os.Args[2], b, 0o644)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "checker:", err)
		os.Exit(2)
	}
}
