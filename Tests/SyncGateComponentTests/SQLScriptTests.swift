import Testing

@testable import SyncGatePostgres

@Suite(.timeLimit(.minutes(10))) struct SQLScriptTests {
    @Test func splitsOnTopLevelSemicolonsOnly() {
        let script = """
            -- a comment; with a semicolon
            CREATE TABLE a (x text DEFAULT 'a;b', "we;ird" int);
            /* block; comment */ INSERT INTO a VALUES ('it''s; fine');
            CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;
            DO $$ BEGIN PERFORM 1; END $$;
            SELECT 1
            """
        let statements = SQLScript.statements(script)
        #expect(statements.count == 5)
        #expect(statements[0].hasPrefix("-- a comment; with a semicolon\nCREATE TABLE a (x text DEFAULT 'a;b', \"we;ird\" int)"))
        #expect(statements[1] == "/* block; comment */ INSERT INTO a VALUES ('it''s; fine')")
        #expect(statements[2] == "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql")
        #expect(statements[3] == "DO $$ BEGIN PERFORM 1; END $$")
        #expect(statements[4] == "SELECT 1")
    }

    @Test func dropsEmptyAndCommentOnlyStatements() {
        #expect(SQLScript.statements(";;  \n-- trailing comment\n") == [])
        #expect(SQLScript.statements("SELECT $1;") == ["SELECT $1"])
    }

    @Test func unterminatedQuotesDoNotLoop() {
        #expect(SQLScript.statements("SELECT 'open; still open") == ["SELECT 'open; still open"])
        #expect(SQLScript.statements("SELECT $x$ open") == ["SELECT $x$ open"])
    }
}
