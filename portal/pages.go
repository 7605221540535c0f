package portal

import "net/http"

type pages struct{ h *Handler }

func newPages(h *Handler) (*pages, error) { return &pages{h: h}, nil }

func (h *Handler) pageRoutes(mux *http.ServeMux) {}
