DROP INDEX docket_pools_open_order;
