// Command kstatus judges Kubernetes objects the way Flux health checks and
// `kubectl wait`-style tooling built on sigs.k8s.io/cli-utils do: it reads
// objects as JSON from stdin (one object, a `List` with `items`, or several
// objects one after another) and prints, for each, one JSON line
// {"kind","namespace","name","status","message"} with the result of
// kstatus's status.Compute. The agentgate e2e tests use it to check that
// every custom resource's status is kstatus compliant.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

func judge(obj map[string]interface{}, out *json.Encoder) error {
	u := &unstructured.Unstructured{Object: obj}
	if items, ok := obj["items"].([]interface{}); ok && strings.HasSuffix(u.GetKind(), "List") {
		for i, item := range items {
			m, ok := item.(map[string]interface{})
			if !ok {
				return fmt.Errorf("items[%d] is not an object", i)
			}
			if err := judge(m, out); err != nil {
				return err
			}
		}
		return nil
	}
	res, err := status.Compute(u)
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out.Encode(verdict{
		Kind:      u.GetKind(),
		Namespace: u.GetNamespace(),
		Name:      u.GetName(),
		Status:    res.Status.String(),
		Message:   res.Message,
	})
}

func run(in io.Reader, w io.Writer) error {
	dec := json.NewDecoder(bufio.NewReader(in))
	out := json.NewEncoder(w)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading JSON: %w", err)
		}
		// As the API machinery reads it: whole numbers become int64, which
		// status.Compute's generation lookups require.
		var obj map[string]interface{}
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("reading JSON: %w", err)
		}
		if err := judge(obj, out); err != nil {
			return err
		}
	}
}

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: kubectl get ... -o json | kstatus")
		os.Exit(2)
	}
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}
