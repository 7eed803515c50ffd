package kube

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func TestHandlerBadRequests(t *testing.T) {
	h := newTestHandler(t, testOptions())
	good := string(reviewJSON(t, basePod(), "team-a"))
	for _, tc := range []struct {
		name, body, contentType string
		want                    int
	}{
		{"no content type", good, "", http.StatusBadRequest},
		{"wrong content type", good, "text/plain", http.StatusBadRequest},
		{"not JSON", "{", "application/json", http.StatusBadRequest},
		{"empty", "", "application/json", http.StatusBadRequest},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "application/json", http.StatusBadRequest},
		{"v1beta1", strings.Replace(good, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), "application/json", http.StatusBadRequest},
		{"object not an object", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":5}}`, "application/json", http.StatusOK},
		{"charset is fine", good, "application/json; charset=utf-8", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(h, []byte(tc.body), tc.contentType)
			if rec.Code != tc.want {
				t.Errorf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
		})
	}
	t.Run("GET /mutate", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/mutate", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("status %d, want 405", rec.Code)
		}
	})
	t.Run("healthz", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("status %d, want 200", rec.Code)
		}
	})
}

func TestHandlerNonPodRequests(t *testing.T) {
	h := newTestHandler(t, testOptions())
	for _, tc := range []struct{ name, request string }{
		{"configmap", `{"uid":"u1","kind":{"version":"v1","kind":"ConfigMap"},"operation":"CREATE","object":{}}`},
		{"pod update", `{"uid":"u1","kind":{"version":"v1","kind":"Pod"},"operation":"UPDATE","object":{"metadata":{"labels":{"airlock.dev/inject":"true"}}}}`},
		{"pod status", `{"uid":"u1","kind":{"version":"v1","kind":"Pod"},"subResource":"status","operation":"CREATE","object":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + tc.request + `}`
			rec := post(h, []byte(body), "application/json")
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("status %d body %s: %v", rec.Code, rec.Body, err)
			}
			if !out.Response.Allowed || out.Response.UID != "u1" || len(out.Response.Patch) != 0 {
				t.Errorf("response %+v, want allowed, uid u1, no patch", out.Response)
			}
		})
	}
}

func TestHandlerUndecodablePodIsRefused(t *testing.T) {
	h := newTestHandler(t, testOptions())
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u2","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"spec":{"containers":"nope"}}}}`
	rec := post(h, []byte(body), "application/json")
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("status %d body %s: %v", rec.Code, rec.Body, err)
	}
	if out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "decode pod") {
		t.Errorf("response %+v, want refused with a decode error", out.Response)
	}
}

// FuzzHandler feeds arbitrary bodies to /mutate: the handler never panics, answers 200 or
// 400, and a 200 is an AdmissionReview whose patch (if any) is valid JSON.
func FuzzHandler(f *testing.F) {
	h, err := NewHandler(testOptions(), quietLogger())
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","namespace":"a","object":{"metadata":{"labels":{"airlock.dev/inject":"true"},"annotations":{"airlock.dev/policy":"p"}},"spec":{"containers":[{"name":"c"}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","object":null}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","object":{"metadata":{"labels":{"airlock.dev/inject":"true"},"annotations":{"airlock.dev/policy":"p"}},"spec":{"initContainers":[{"name":"airlock"}],"volumes":[{"name":"x"}]}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := post(h, body, "application/json")
		switch rec.Code {
		case http.StatusBadRequest:
			return
		case http.StatusOK:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("200 without an AdmissionReview response: %v %s", err, rec.Body)
		}
		if len(out.Response.Patch) > 0 && !json.Valid(out.Response.Patch) {
			t.Fatalf("patch is not JSON: %s", out.Response.Patch)
		}
	})
}
