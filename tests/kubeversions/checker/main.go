// kubecheck runs CustomResourceDefinitions through the create-time validation of the
// kube-apiserver it is built against (k8s.io/apiextensions-apiserver at one minor): strict
// decoding into that minor's apiextensions.k8s.io/v1 types (a field the minor does not know
// is an error), the v1 defaults, conversion to the internal type, and
// validation.ValidateCustomResourceDefinition, which includes the structural-schema checks
// and CEL compilation with cost estimation against the per-rule and per-CRD budgets.
//
// Usage: kubecheck FILE...  (multi-document YAML; documents of other kinds are ignored)
// Prints "ok NAME" or one line per error; exits 1 if any CRD is refused, 2 on bad input.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubecheck FILE...")
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	install.Install(scheme)
	refused := false
	for _, path := range os.Args[1:] {
		docs, err := documents(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		for _, doc := range docs {
			ok, err := check(scheme, path, doc)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
				os.Exit(2)
			}
			refused = refused || !ok
		}
	}
	if refused {
		os.Exit(1)
	}
}

func documents(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// check validates one document if it is a CRD; false when the API server would refuse it.
func check(scheme *runtime.Scheme, path string, doc []byte) (bool, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return false, err
	}
	if head.Kind != "CustomResourceDefinition" {
		return true, nil
	}
	if head.APIVersion != "apiextensions.k8s.io/v1" {
		return false, fmt.Errorf("CRD apiVersion %q: only apiextensions.k8s.io/v1 is checked", head.APIVersion)
	}
	v1 := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(doc, v1); err != nil {
		fmt.Printf("%s: %s: not decodable by this Kubernetes version: %v\n", path, nameOf(doc), err)
		return false, nil
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(v1, internal, nil); err != nil {
		return false, err
	}
	errs := validation.ValidateCustomResourceDefinition(context.Background(), internal)
	if len(errs) == 0 {
		fmt.Printf("ok %s\n", v1.Name)
		return true, nil
	}
	for _, e := range errs {
		fmt.Printf("%s: %s: %s\n", path, v1.Name, e.Error())
	}
	return false, nil
}

func nameOf(doc []byte) string {
	var meta struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	_ = yaml.Unmarshal(doc, &meta)
	return meta.Metadata.Name
}
