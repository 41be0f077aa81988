def test_it_serves_the_dashboard_to_a_member(admin):
    response = admin.client.get("/")
    assert response.status_code == 200
    assert b"Acme" in response.content
