package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReviewBytes bounds an AdmissionReview body; the API server caps objects at 3 MiB.
const maxReviewBytes = 8 << 20

// Handler serves the webhook: POST /mutate (admission.k8s.io/v1 AdmissionReview) and GET
// /healthz.
type Handler struct {
	opts Options
	log  logrus.FieldLogger
	mux  *http.ServeMux
}

// NewHandler validates opts (errors wrap ErrInvalidOptions) and returns the webhook handler;
// log receives one line per review.
func NewHandler(opts Options, log logrus.FieldLogger) (*Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{opts: opts, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /mutate", h.mutate)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) mutate(w http.ResponseWriter, r *http.Request) {
	review, status, err := decodeReview(w, r)
	if err != nil {
		h.log.WithField("error", err.Error()).Warn("bad admission request")
		http.Error(w, err.Error(), status)
		return
	}
	resp := h.review(review.Request)
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	}
	body, err := json.Marshal(out)
	if err != nil {
		http.Error(w, "encode admission response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// decodeReview reads an AdmissionReview; errors come with the HTTP status to answer.
func decodeReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, http.StatusBadRequest, fmt.Errorf("content type %q: want application/json", r.Header.Get("Content-Type"))
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReviewBytes))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("read admission review: %w", err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("decode admission review: %w", err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" {
		return nil, http.StatusBadRequest, fmt.Errorf("admission review %s %s: want admission.k8s.io/v1 AdmissionReview", review.APIVersion, review.Kind)
	}
	if review.Request == nil || review.Request.UID == "" {
		return nil, http.StatusBadRequest, errors.New("admission review has no request (or no request uid)")
	}
	return &review, 0, nil
}

// review decides one admission request.
func (h *Handler) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	log := h.log.WithFields(logrus.Fields{"uid": string(req.UID), "namespace": req.Namespace, "name": req.Name, "operation": string(req.Operation)})
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		log.WithField("kind", req.Kind.Kind).Info("not a pod creation; admitted unchanged")
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(resp, log, fmt.Errorf("%w: decode pod: %v", ErrDenied, err))
	}
	if pod.Name != "" {
		log = log.WithField("name", pod.Name)
	} else if pod.GenerateName != "" {
		log = log.WithField("generate_name", pod.GenerateName)
	}
	res, err := Mutate(&pod, req.Namespace, &h.opts)
	if err != nil {
		return deny(resp, log, err)
	}
	if res.Skipped != "" {
		log.WithField("reason", res.Skipped).Info("pod admitted without injection")
		return resp
	}
	if len(res.Patch) == 0 {
		log.Info("pod already injected")
		return resp
	}
	patch, err := json.Marshal(res.Patch)
	if err != nil {
		return deny(resp, log, fmt.Errorf("%w: encode patch: %v", ErrDenied, err))
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	log.WithField("operations", len(res.Patch)).Info("airlock sidecar injected")
	return resp
}

// deny refuses the pod with err's message (fail closed: a pod the webhook cannot vouch for
// is not admitted).
func deny(resp *admissionv1.AdmissionResponse, log logrus.FieldLogger, err error) *admissionv1.AdmissionResponse {
	log.WithField("reason", err.Error()).Warn("pod refused")
	resp.Allowed = false
	resp.Result = &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: err.Error(),
	}
	return resp
}
