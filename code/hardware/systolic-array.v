// An N x N output-stationary systolic array: C = A * B with A of N x K and B of K x N.
// Row i of A enters from the left, column j of B from the top, each skewed by its index, so
// A[i][k] and B[k][j] meet in PE (i, j) at cycle k + i + j. Each PE multiplies what arrives,
// adds it to its own accumulator and passes a to the right and b downwards, one register each.
// After K + 2(N - 1) cycles every accumulator holds its dot product.
// --8<-- [start:pe]
module pe #(parameter W = 8, parameter ACC = 32) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire signed [W-1:0]   a_in,
    input  wire signed [W-1:0]   b_in,
    output reg  signed [W-1:0]   a_out,
    output reg  signed [W-1:0]   b_out,
    output reg  signed [ACC-1:0] acc
);
    always @(posedge clk) begin
        if (rst) begin
            a_out <= 0;
            b_out <= 0;
            acc   <= 0;
        end else begin
            acc   <= acc + a_in * b_in;  // one multiply-accumulate per cycle
            a_out <= a_in;               // pass a to the right neighbour
            b_out <= b_in;               // pass b to the neighbour below
        end
    end
endmodule
// --8<-- [end:pe]

// --8<-- [start:array]
module systolic_array #(parameter N = 4, parameter W = 8, parameter ACC = 32) (
    input  wire                    clk,
    input  wire                    rst,
    input  wire [N*W-1:0]          a_left,   // a_left[i*W +: W] enters row i
    input  wire [N*W-1:0]          b_top,    // b_top[j*W +: W] enters column j
    output wire [N*N*ACC-1:0]      c_flat    // c_flat[(i*N+j)*ACC +: ACC] = C[i][j]
);
    // a_bus[i][j] is the a entering PE (i, j); column N is the unused output of the last PE.
    wire signed [W-1:0] a_bus [0:N-1][0:N];
    wire signed [W-1:0] b_bus [0:N][0:N-1];
    genvar i, j;
    generate
        for (i = 0; i < N; i = i + 1) begin : edge_a
            assign a_bus[i][0] = a_left[i*W +: W];
        end
        for (j = 0; j < N; j = j + 1) begin : edge_b
            assign b_bus[0][j] = b_top[j*W +: W];
        end
        for (i = 0; i < N; i = i + 1) begin : row
            for (j = 0; j < N; j = j + 1) begin : col
                pe #(.W(W), .ACC(ACC)) u (
                    .clk(clk), .rst(rst),
                    .a_in(a_bus[i][j]), .b_in(b_bus[i][j]),
                    .a_out(a_bus[i][j+1]), .b_out(b_bus[i+1][j]),
                    .acc(c_flat[(i*N+j)*ACC +: ACC])
                );
            end
        end
    endgenerate
endmodule
// --8<-- [end:array]
