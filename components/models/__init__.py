"""Small torch models shared by techniques (federated client nets, the tiny MoE LM for routing traces)."""
