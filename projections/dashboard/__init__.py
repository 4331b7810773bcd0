"""`rollout dashboard`: a live web UI over the projection topics.

    every request ──► guard.py (identity: session cookie | Bearer token | none → login.py;
                      same origin + CSRF token on POST; CSP and hardening headers)

    projection topics ──► reader.py (read_committed consumer, from the beginning)
                               │ absorb(view, topic role, record)        (fleet.py, pure)
                               ▼
                          FleetView ──► pages.py (pure queries: lists, pages, filters)
                               │                   ▲
                               └─► changes ─► server.py (aiohttp: JSON API, SSE, static/)
                                                   │
     browser buttons ──► SubjectAccessReview (kube_access.py) ──► commands.py ──► intents
                         topic (RolloutCommanded, user = the verified identity, via=dashboard)
                                   verdicts.py ◄── dead letters / verdicts, by event id

The dashboard is one more reader of the log, like `rollout status`: it folds the compacted
module-status, rollout-targets and assemblage topics, the append-only decisions and dead
letters, and the cluster observations into an in-memory `FleetView`, and serves pages cut
from it (filtered and paginated on the server, so thousands of clusters cost the browser
one page). The browser learns that something changed through server-sent events and asks
again for what it shows. Commands are the CLI's: the same `RolloutCommanded` on the intents
topic; the engine's verdict on that event (its id) is shown where the button was pressed.

Who may see and press what (docs/security.md): users log in with OIDC (oidc.py) or a
Kubernetes token (TokenReview); a button is pressed in the user's name only when Kubernetes
RBAC lets that user create the rollout.dev object meaning the same (a RolloutCommand, or a
RolloutApproval), in the module's namespace.
"""
