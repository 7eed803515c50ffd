package kube

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sirupsen/logrus"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// testOptions are the webhook options the tests run with (before Validate fills defaults).
func testOptions() Options {
	return Options{Image: "registry.test/airlock:v1", UpstreamDNS: "10.96.0.10:53", Namespace: "airlock-system"}
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func newTestHandler(t *testing.T, o Options) *Handler {
	t.Helper()
	h, err := NewHandler(o, quietLogger())
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

// basePod is a labelled pod naming its policy ConfigMap.
func basePod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "agent-1", Namespace: "team-a",
			Labels:      map[string]string{LabelInject: "true"},
			Annotations: map[string]string{AnnotationPolicy: "agent-policy"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: "python:3.13",
			Env: []corev1.EnvVar{{Name: "FOO", Value: "bar"}, {Name: "HTTP_PROXY", Value: "http://elsewhere.test:8080"}},
		}}},
	}
}

// reviewJSON is the AdmissionReview the API server would send for creating pod in namespace.
func reviewJSON(t *testing.T, pod *corev1.Pod, namespace string) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	rev := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("req-" + pod.Name),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: namespace,
			Name:      pod.Name,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(rev)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// post sends body to the handler's /mutate and returns the recorded response.
func post(h http.Handler, body []byte, contentType string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// admit runs pod through the handler and returns the response (which must be a 200
// AdmissionReview answering the same UID).
func admit(t *testing.T, h http.Handler, pod *corev1.Pod, namespace string) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := post(h, reviewJSON(t, pod, namespace), "application/json")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("response type %s %s", out.APIVersion, out.Kind)
	}
	if out.Response == nil || out.Response.UID != types.UID("req-"+pod.Name) {
		t.Fatalf("response %+v does not answer uid req-%s", out.Response, pod.Name)
	}
	return out.Response
}

// applyPatch applies resp's JSON patch to pod with a real RFC 6902 implementation and
// decodes the result into a corev1.Pod.
func applyPatch(t *testing.T, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	if !resp.Allowed {
		t.Fatalf("pod refused: %v", resp.Result)
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType %v, want JSONPatch", resp.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decode patch: %v\n%s", err, resp.Patch)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch: %v\n%s", err, resp.Patch)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	var got corev1.Pod
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("patched pod does not decode into corev1.Pod: %v\n%s", err, out)
	}
	return &got
}

func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func argValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag {
			if i+1 < len(args) {
				return args[i+1], true
			}
			return "", true
		}
	}
	return "", false
}
