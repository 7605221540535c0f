package dashboard

import (
	"net/http"
)

func (h *Handler) partitions(w http.ResponseWriter, r *http.Request) {
	reports, err := h.maint.Report(r.Context(), false)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The partitions could not be read.", err)
		return
	}
	var expired, pending int
	for _, t := range reports {
		for _, p := range t.Partitions {
			if p.Expired {
				expired++
			}
			if p.DetachPending {
				pending++
			}
		}
	}
	h.render(w, r, http.StatusOK, "partitions", map[string]any{"Title": "Partitions and retention",
		"Tables": reports, "Expired": expired, "DetachPending": pending})
}
