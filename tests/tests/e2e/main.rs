//! End to end, one binary (each file a module, so the whole stack is
//! linked once): the real server on `127.0.0.1:0` over real sockets,
//! anvil nodes as upstreams, ethers, viem and web3.py as clients, a real
//! `nats-server` for the bus.

mod book_examples;
mod bus;
mod bus_history;
mod bus_webhooks;
mod clients;
mod custom_filters;
mod devnet_history;
mod devnet_transactions;
mod faulty_node;
mod filter_contract_v02;
mod filter_hot_swap;
mod filter_isolation;
mod filter_uploads;
mod finality;
mod forward;
mod history;
mod keys;
mod lifecycle;
mod limits;
mod load;
mod node_parity;
mod prices;
mod prices_cold;
mod prices_on_anvil;
mod receipts;
mod reorgs;
mod resume;
mod resume_on_anvil;
mod resuming_clients;
mod rpc;
mod several_nodes;
mod slow_consumer;
mod subscriptions;
mod supervision;
mod upstream;
mod watchlists;
mod webhooks;
