"""Federated learning on Ray actors: clients, hosts, server loop, participation patterns and
strategies (FedAvg/FedProx, local-only, FML, FedProto, PHP-FL). See README.md in this folder."""
