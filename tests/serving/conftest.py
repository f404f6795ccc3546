"""Serving fixtures: one Ray Serve instance for the whole test session, on 127.0.0.1.

Usage in a test module under tests/serving/::

    from components.serving.app import deploy, post_json

    def test_my_endpoint(serve_instance):
        deploy(MyDeployment.bind(...), name="my_app", route_prefix="/my")   # unique name per module
        status, body = post_json(serve_instance.url("/my"), {...})

``serve_instance`` (tests/conftest.py; a :class:`components.serving.app.ServeInfo`: host, port,
``url(route)``) starts Serve once on top of the shared ``ray_session``, on a free port, and shuts it
down when the session ends (Serve start + stop costs ~7 s, so it is never per test).
Give every application its own name and route prefix, and ``undeploy`` it at the end of its
module if it is heavy, so modules do not see each other's apps.
"""
