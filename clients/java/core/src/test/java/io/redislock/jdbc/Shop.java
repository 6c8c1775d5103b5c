package io.redislock.jdbc;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

/**
 * The inventory of the fenced-transaction tests, in tables of its own: {@code stock(sku, qty,
 * fence)} with one row, {@code sales(sku, seller)} with a row per sale, and a fence table. Its
 * statements are plain (read, decide, write); only {@link #oldRecipeSell} carries the token, in
 * the recipe that loses an update. Public, in the core's test-jar, for the spring module's tests.
 */
public final class Shop {
    public static final String SKU = "sku9";

    public final String stock;
    public final String sales;
    public final String fences;
    /** The fence options of this shop: its own fence table. */
    public final FenceOptions options;

    public Shop(String stock, String sales, String fences) {
        this.stock = stock;
        this.sales = sales;
        this.fences = fences;
        this.options = FenceOptions.defaults().table(fences);
    }

    /** New tables in {@code db}: {@code qty} in stock (fence 0), no sales, an empty fence table. */
    public static Shop open(TestDatabase db, int qty) throws SQLException {
        Shop shop = new Shop(TestDatabase.unique("stock"), TestDatabase.unique("sales"), TestDatabase.unique("fences"));
        db.exec("CREATE TABLE " + shop.stock
                + " (sku VARCHAR(64) PRIMARY KEY, qty INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
                "CREATE TABLE " + shop.sales + " (sku VARCHAR(64) NOT NULL, seller VARCHAR(64) NOT NULL)",
                "INSERT INTO " + shop.stock + " (sku, qty, fence) VALUES ('" + SKU + "', " + qty + ", 0)");
        JdbcFence.createTable(db.dataSource(), shop.options);
        return shop;
    }

    /** The quantity in stock, read in {@code c}'s transaction. */
    public int qty(Connection c) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("SELECT qty FROM " + stock + " WHERE sku = ?")) {
            s.setString(1, SKU);
            try (ResultSet rs = s.executeQuery()) {
                if (!rs.next()) {
                    throw new SQLException("no stock row");
                }
                return rs.getInt(1);
            }
        }
    }

    /** One sale decided on a read of {@code read}: writes {@code read - 1} and records the sale. */
    public void sell(Connection c, int read, String seller) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("UPDATE " + stock + " SET qty = ? WHERE sku = ?")) {
            s.setInt(1, read - 1);
            s.setString(2, SKU);
            s.executeUpdate();
        }
        record(c, seller);
    }

    /**
     * The recipe that loses an update (docs/fencing.md, "do not copy"): {@code UPDATE stock SET qty
     * = :read - 1, fence = :token WHERE sku = .. AND fence <= :token}, the sale recorded when it
     * wrote; the rows it wrote.
     */
    public int oldRecipeSell(Connection c, int read, long token, String seller) throws SQLException {
        int rows;
        try (PreparedStatement s = c.prepareStatement(
                "UPDATE " + stock + " SET qty = ?, fence = ? WHERE sku = ? AND fence <= ?")) {
            s.setInt(1, read - 1);
            s.setLong(2, token);
            s.setString(3, SKU);
            s.setLong(4, token);
            rows = s.executeUpdate();
        }
        if (rows == 1) {
            record(c, seller);
        }
        return rows;
    }

    private void record(Connection c, String seller) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("INSERT INTO " + sales + " (sku, seller) VALUES (?, ?)")) {
            s.setString(1, SKU);
            s.setString(2, seller);
            s.executeUpdate();
        }
    }

    /** The quantity in stock now (a connection of its own). */
    public int qty(TestDatabase db) throws SQLException {
        try (Connection c = db.connect()) {
            return qty(c);
        }
    }

    /** The sales recorded now (a connection of its own). */
    public long sales(TestDatabase db) throws SQLException {
        return db.queryLong("SELECT count(*) FROM " + sales);
    }
}
