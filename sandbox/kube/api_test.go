package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestRESTAPIWire checks what the core/v1 REST client puts on the wire: the API server paths,
// methods and JSON bodies a real API server expects, and a 404 Status turned into NotFound.
// (No API server can run here; this server answers like one for these four calls.)
func TestRESTAPIWire(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/team/configmaps/missing":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
				Details: &metav1.StatusDetails{Name: "missing", Kind: "configmaps"}})
		case r.Method == http.MethodPost || r.Method == http.MethodPut:
			var obj map[string]any
			if err := json.Unmarshal(body, &obj); err != nil || obj["kind"] == nil {
				t.Errorf("%s %s: body %q is not a typed JSON object", r.Method, r.URL.Path, body)
			}
			obj["metadata"].(map[string]any)["uid"] = "uid-1"
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(obj)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()

	api, err := newRESTAPI(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := api.GetConfigMap(ctx, "team", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("GetConfigMap of a missing ConfigMap: %v, want NotFound", err)
	}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"}, Data: map[string]string{"policy.yaml": "x"}}
	got, err := api.CreateConfigMap(ctx, cm)
	if err != nil || got.UID != "uid-1" || got.Data["policy.yaml"] != "x" {
		t.Errorf("CreateConfigMap = %+v, %v", got, err)
	}
	if _, err := api.UpdateConfigMap(ctx, cm); err != nil {
		t.Errorf("UpdateConfigMap: %v", err)
	}
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "team"}}
	if p, err := api.CreatePod(ctx, pod); err != nil || p.Name != "s" || p.UID != "uid-1" {
		t.Errorf("CreatePod = %+v, %v", p, err)
	}
	want := []string{
		"GET /api/v1/namespaces/team/configmaps/missing",
		"POST /api/v1/namespaces/team/configmaps",
		"PUT /api/v1/namespaces/team/configmaps/p",
		"POST /api/v1/namespaces/team/pods",
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("requests %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, seen[i], want[i])
		}
	}
}
