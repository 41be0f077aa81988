"""The agents app's JSON API, by concern: agents and their versions (`agents`, under `/agents`), runs and their
events (`runs`), sessions (`sessions`), attachments, replay; the streams they serve are `streams`. One router,
its parts added in the order the schema lists them."""

from ninja import Router

from agents.api import agents, attachments, replay, runs, sessions

router = Router()
router.add_router("/agents", agents.router)
router.add_router("", runs.router)
router.add_router("", sessions.router)
router.add_router("", attachments.router)
router.add_router("", replay.router)
