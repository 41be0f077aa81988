"""The agents app's JSON API, by concern: agents and their versions (`agent_routes`, under `/agents`), runs and
their events (`run_routes`), sessions (`session_routes`), attachments (`attachment_routes`), replay
(`replay_routes`); the streams they serve are `stream_routes`. One router, its parts added in the order the schema
lists them."""

from ninja import Router

from agents.api import agent_routes, attachment_routes, replay_routes, run_routes, session_routes

router = Router()
router.add_router("/agents", agent_routes.router)
router.add_router("", run_routes.router)
router.add_router("", session_routes.router)
router.add_router("", attachment_routes.router)
router.add_router("", replay_routes.router)
