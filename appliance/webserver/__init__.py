"""The appliance's HTTP server: health and metrics, the operator's page and its API, snapshots, event clips and
video, on one address. Routes come grouped by kind (``Routes``: health, requests, streams), and each kind has its
own limits (``Limits``), so a video stream or a long download never takes a page request's place, and nothing a
page client holds delays ``/healthz``."""
